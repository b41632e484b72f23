"""The store's load places every link at its ends' loaded rows, also where deleted rows left
DuckDB's row ids apart from the rows' positions (store/database.py ``TableRows.locate``)."""

from __future__ import annotations

from pathlib import Path

import duckdb

from tests.graph_helpers import GRAPH_FILE, open_graph
from tests.vectors import remember_body

NOTES = 8
FORGOTTEN = 3


def test_links_load_at_their_ends_after_rows_were_deleted(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    try:
        ids = [
            graph.remember(remember_body(f"note number {i}", ["shared", f"own {i}"]))["saved"]
            for i in range(NOTES)
        ]
        graph.flush_due()  # the rows reach the file, then some are deleted from it
        for memory_id in ids[:FORGOTTEN]:
            graph.forget({"memory_id": memory_id})
    finally:
        graph.close()
    with duckdb.connect(str(tmp_path / GRAPH_FILE)) as conn:
        stored = set(conn.execute("SELECT key_id, memory_id FROM links").fetchall())
        shifted = conn.execute(
            "SELECT count(*) FROM (SELECT rowid - row_number() OVER (ORDER BY rowid) + 1 AS gap "
            "FROM memories) WHERE gap > 0"
        ).fetchall()[0][0]
    # the premise: rows after the forgotten ones sit at ids past their positions
    assert shifted > 0 and len(stored) == 2 * (NOTES - FORGOTTEN)
    graph = open_graph(tmp_path)
    try:
        state = graph.state
        by_memory = {(k, m) for m in state.memories for k in state.mem_links[m]}
        by_key = {(k, m) for k in state.keys for m in state.key_links[k]}
        assert by_memory == by_key == stored
        assert set(state.memories) == set(ids[FORGOTTEN:])
    finally:
        graph.close()
