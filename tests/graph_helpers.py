"""Helpers for graph tests: open a graph on a real DuckDB file, count what is on disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

from keymem.services.graph import GraphService
from keymem.store.schema import TABLES

GRAPH_FILE = "graph.duckdb"


def open_graph(home: Path) -> GraphService:
    return GraphService(home / GRAPH_FILE)


def table_counts(path: Path) -> dict[str, int]:
    """Rows per table, read straight from a closed graph file."""
    conn = duckdb.connect(str(path), read_only=True)
    try:
        return {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]) for t in TABLES}
    finally:
        conn.close()


def key_id_of(graph: GraphService, concept: str, namespace: str = "default") -> str:
    index = graph.state.indexes[namespace]
    key_id = index.exact[concept.lower()]
    return key_id


def active_ids(graph: GraphService, key_id: str, namespace: str = "default") -> list[str]:
    page: dict[str, Any] = graph.read_key({"key_id": key_id, "namespace": namespace, "limit": 50})
    return [h["memory_id"] for h in page["memories"]]


def damage_file(path: Path, statements: list[tuple[str, list[Any]]]) -> None:
    """Run raw SQL on a closed graph file: rows no write path would make."""
    conn = duckdb.connect(str(path))
    try:
        for sql, params in statements:
            conn.execute(sql, params)
    finally:
        conn.close()
