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


def test_memory_records_load_as_the_file_holds_them_in_python_types(tmp_path: Path) -> None:
    """Columns of one value (namespace, access count), of none (expiry) and mixed (superseded
    by: one corrected note) come back per record exactly as the file's rows hold them, as
    Python values: a list made at once for a column of one value or none (``shared_column``)
    must not hand out numpy scalars or masked constants."""
    graph = open_graph(tmp_path)
    try:
        ids = [
            graph.remember(remember_body(f"plain note {i}", ["shared", f"own {i}"]))["saved"]
            for i in range(NOTES)
        ]
        graph.correct({**remember_body("plain note 0, corrected", ["shared"]), "memory_id": ids[0]})
        graph.flush_due()
    finally:
        graph.close()
    columns = ["id", "namespace", "superseded_by", "supersedes", "access_count", "expires_at"]
    with duckdb.connect(str(tmp_path / GRAPH_FILE)) as conn:
        rows = conn.execute(f"SELECT {', '.join(columns)} FROM memories").fetchall()
    # the premise: one column of one value, one of none, one mixed
    assert len({r[1] for r in rows}) == 1 and all(r[5] is None for r in rows)
    assert sum(r[2] is None for r in rows) == len(rows) - 1
    graph = open_graph(tmp_path)
    try:
        for row in rows:
            record = graph.state.memories[row[0]]
            loaded = tuple(getattr(record, name) for name in columns)
            assert loaded == row
            assert [type(v) for v in loaded] == [type(v) for v in row]
    finally:
        graph.close()
