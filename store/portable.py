"""Portable JSON export and import of a whole graph, key vectors included.

The export is every row of every content table (not the change-feed history, which belongs
to one database's epoch), sorted, with vectors as float lists (float32 survives the round
trip through JSON exactly). Import runs in one transaction, skips ids that already exist, and
appends feed events for what it added so a running lexicon picks the memories up. Export never
overwrites a file. Export -> import into an empty home -> export gives the same content.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from keymem.protocol.errors import BadRequest, Conflict
from keymem.store.changes import OP_UPSERT
from keymem.store.database import (
    EFFECTIVE_LINKS,
    EVENT_WIDTH,
    GraphStore,
    checked_meta,
    meta_number,
    read_meta,
)
from keymem.store.schema import SCHEMA_VERSION, current_version

EXPORT_FORMAT = "keymem-graph-export"
PRIVATE_FILE_MODE = 0o600
EXPORT_VERSION = 1
# Not memory_vectors: a code is tied to the embedder that made it (the importing home's may be
# another), and the graph's background pass vectorises every imported memory again.
EXPORTED_TABLES = (
    "keys",
    "key_aliases",
    "alias_candidates",
    "memories",
    "links",
    "related",
    "contradictions",
    "confirmations",
)
EXPORTED_META = ("fingerprint", "dim")
# Which column ties a row to a key or a memory, to skip rows of ids the target already has.
OWNER_COLUMNS: dict[str, tuple[str | None, str | None]] = {
    "keys": ("id", None),
    "key_aliases": ("key_id", None),
    "alias_candidates": ("key_id", None),
    "memories": (None, "id"),
    "links": ("key_id", "memory_id"),
    "related": (None, "memory_id"),
    "contradictions": (None, "memory_id"),
    "confirmations": (None, "memory_id"),
}


def _columns(conn: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    return [(str(r[0]), str(r[1])) for r in conn.execute(f"DESCRIBE {table}").fetchall()]


def _to_json(value: Any, kind: str) -> Any:
    if kind == "BLOB" and value is not None:
        return [float(x) for x in np.frombuffer(value, dtype="<f4")]
    return value


def _from_json(value: Any, kind: str) -> Any:
    if kind == "BLOB" and value is not None:
        return np.asarray(value, dtype="<f4").tobytes()
    return value


def adapted_columns(conn: duckdb.DuckDBPyConnection, table: str, names: list[Any]) -> list[str]:
    """This schema's columns of ``table`` for an export that has ``names``, or ``BadRequest``.

    An export from before schema 3 has no ``links.learned``: none of its links was learned.
    """
    columns = [name for name, _ in _columns(conn, table)]
    if names == columns or (table == "links" and names == columns[:-1]):
        return columns
    raise BadRequest(f"export columns of {table} do not match this schema")


def adapted_row(row: list[Any], names: list[Any], columns: list[str]) -> list[Any]:
    """``row`` (of ``names``) with the defaults of columns the export did not have yet."""
    return row if len(names) == len(columns) else [*row, False]


def export_graph(conn: duckdb.DuckDBPyConnection, out: Path) -> dict[str, int]:
    """Write the export to ``out`` (which must not exist); returns rows per table."""
    if out.exists():
        raise FileExistsError(f"{out} exists; keymem export never overwrites a file")
    meta = checked_meta(read_meta(conn), "the exported graph file")
    tables: dict[str, Any] = {}
    counts: dict[str, int] = {}
    for table in EXPORTED_TABLES:
        columns = _columns(conn, table)
        source = f"({EFFECTIVE_LINKS})" if table == "links" else table
        rows = conn.execute(f"SELECT * FROM {source} ORDER BY ALL").fetchall()
        tables[table] = {
            "columns": [name for name, _ in columns],
            "rows": [
                [_to_json(v, kind) for v, (_, kind) in zip(row, columns, strict=True)]
                for row in rows
            ],
        }
        counts[table] = len(rows)
    document = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "schema_version": current_version(conn) or SCHEMA_VERSION,
        "exported_at": time.time(),
        "meta": {name: meta[name] for name in EXPORTED_META if name in meta},
        "tables": tables,
    }
    partial = out.with_name(out.name + ".partial")
    # 0600 whatever the umask: an export holds every memory, wherever it is written
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    with open(descriptor, "w", encoding="utf-8") as handle:
        json.dump(document, handle, ensure_ascii=False, separators=(",", ":"))
        handle.flush()
        os.fsync(handle.fileno())
    if out.exists():
        partial.unlink()
        raise FileExistsError(f"{out} appeared while exporting; not overwritten")
    os.replace(partial, out)
    return counts


def read_export(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        document = json.load(handle)
    if not isinstance(document, dict) or document.get("format") != EXPORT_FORMAT:
        raise BadRequest(f"{path} is not a keymem graph export")
    if document.get("version") != EXPORT_VERSION:
        raise BadRequest(f"unsupported export version {document.get('version')!r}")
    return document


def import_graph(store: GraphStore, document: dict[str, Any]) -> dict[str, int]:
    """Add every row whose key/memory id is new to ``store``, in one transaction."""
    conn = store.conn
    meta = store.read_meta()
    incoming = document.get("meta", {})
    for name in EXPORTED_META:
        if name in incoming and name in meta and incoming[name] != meta[name]:
            raise Conflict(
                f"export has {name}={incoming[name]!r}, this graph {meta[name]!r}",
                {name: meta[name]},
            )
    existing_keys = {r[0] for r in conn.execute("SELECT id FROM keys").fetchall()}
    existing_memories = {r[0] for r in conn.execute("SELECT id FROM memories").fetchall()}
    tables = document["tables"]
    new_keys = {r[0] for r in tables["keys"]["rows"]} - existing_keys
    new_memories = {r[0] for r in tables["memories"]["rows"]} - existing_memories
    known_keys = existing_keys | new_keys
    added: dict[str, int] = {}
    plan: list[tuple[str, list[list[Any]], int]] = []
    for table in EXPORTED_TABLES:
        columns = _columns(conn, table)
        given = tables[table]["columns"]
        names = adapted_columns(conn, table, given)
        rows_in = [adapted_row(row, given, names) for row in tables[table]["rows"]]
        key_col, memory_col = OWNER_COLUMNS[table]
        key_at = names.index(key_col) if key_col else None
        memory_at = names.index(memory_col) if memory_col else None
        rows = []
        for row in rows_in:
            if table == "links":
                assert key_at is not None and memory_at is not None  # a link has both
                # a link is new when either end is new and both ends exist afterwards
                if row[key_at] not in known_keys:
                    continue
                if row[key_at] not in new_keys and row[memory_at] not in new_memories:
                    continue
            elif (key_at is not None and row[key_at] not in new_keys) or (
                memory_at is not None and row[memory_at] not in new_memories
            ):
                continue
            rows.append([_from_json(v, kind) for v, (_, kind) in zip(row, columns, strict=True)])
        plan.append((table, rows, len(columns)))
        added[table] = len(rows)
    memory_names = tables["memories"]["columns"]
    id_at, ns_at, sup_at = (
        memory_names.index("id"),
        memory_names.index("namespace"),
        memory_names.index("superseded_by"),
    )
    head = int(conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchall()[0][0])
    head = max(head, meta_number(meta, "pruned_through"))
    now = time.time()
    events = []
    for row in sorted(tables["memories"]["rows"], key=lambda r: r[id_at]):
        if row[id_at] in new_memories and row[sup_at] is None:
            head += 1
            events.append((head, OP_UPSERT, row[id_at], row[ns_at], now, None, None, None))
    conn.execute("BEGIN TRANSACTION")
    try:
        for table, rows, width in plan:
            store.insert_rows(table, width, rows)
        store.insert_rows("events", EVENT_WIDTH, events)
        for name in EXPORTED_META:
            if name in incoming and name not in meta:
                conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [name, incoming[name]])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    added["events"] = len(events)
    return added
