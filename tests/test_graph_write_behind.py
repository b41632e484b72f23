"""The graph's write-behind (store/writelog.py): a write is acknowledged once its record is in
the graph's own log, and reaches DuckDB later, many writes in one transaction.

What a user would notice if it went wrong: an acknowledged memory missing after a crash, a
memory written twice after a crash at the wrong moment, the feed (and so search) not seeing a
fresh write, or a group of writes leaving the file in another state than memory.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from keymem.services.graph import GraphService, views
from keymem.services.graph.service import WRITE_BEHIND_INTERVAL_S
from keymem.store.writelog import log_path
from tests.graph_helpers import GRAPH_FILE, open_graph, table_counts
from tests.vectors import remember_body

REPOSITORY = Path(__file__).parent.parent
WRITES = 20

# Remembers and dies without closing the graph or folding its log, as kill -9 would: each id
# is printed only after its remember returned, i.e. was acknowledged.
WRITER = """
import os, sys
from pathlib import Path
from tests.graph_helpers import open_graph
from tests.vectors import remember_body
graph = open_graph(Path(sys.argv[1]))
for i in range(int(sys.argv[2])):
    reply = graph.remember(remember_body(f"write-behind fact {i}", ["behind", f"fact{i:02d}"]))
    print(reply["saved"], flush=True)
os._exit(0)
"""


def _kill(graph: GraphService) -> None:
    """Drop the graph as kill -9 would: no fold of the log, no checkpoint, no close."""
    graph.store.conn.close()
    graph.store.log.close()


def _views(graph: GraphService, ids: list[str], now: float) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = views.get_memories(
        graph.state, {"ids": ids, "include_inactive": True}, now
    )["memories"]
    return found


def test_acknowledged_writes_only_in_the_log_survive_a_kill(tmp_path: Path) -> None:
    written = subprocess.run(
        [sys.executable, "-c", WRITER, str(tmp_path), str(WRITES)],
        check=True,
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
    )
    acked = written.stdout.split()
    assert len(acked) == WRITES
    assert table_counts(tmp_path / GRAPH_FILE)["memories"] < WRITES  # still in the log
    graph = open_graph(tmp_path)
    try:
        assert graph.get_memories({"ids": acked})["missing"] == []
    finally:
        graph.close()
    assert table_counts(tmp_path / GRAPH_FILE)["memories"] == WRITES  # folded in at the open
    assert log_path(tmp_path / GRAPH_FILE).stat().st_size == 0


def test_a_log_folded_just_before_a_crash_is_not_applied_twice(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    saved = [
        graph.remember(remember_body(f"folded once {i}", ["folded", f"once{i}"]))["saved"]
        for i in range(3)
    ]
    logged = log_path(tmp_path / GRAPH_FILE).read_bytes()
    graph.flush_due()  # DuckDB holds them now; the crash comes before the log is emptied
    log_path(tmp_path / GRAPH_FILE).write_bytes(logged)
    _kill(graph)
    reopened = open_graph(tmp_path)
    try:
        assert reopened.get_memories({"ids": saved})["missing"] == []
        assert reopened.counts({})["memories"] == 3
        after = reopened.remember(remember_body("written after", ["after"]))["saved"]
    finally:
        reopened.close()
    assert table_counts(tmp_path / GRAPH_FILE)["memories"] == 4
    final = open_graph(tmp_path)
    try:
        assert final.get_memories({"ids": [*saved, after]})["missing"] == []
    finally:
        final.close()


def test_a_torn_last_record_is_cut_off_and_later_writes_are_kept(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    saved = [graph.remember(remember_body(f"whole {i}", ["whole"]))["saved"] for i in range(2)]
    _kill(graph)
    with open(log_path(tmp_path / GRAPH_FILE), "ab") as log_file:
        log_file.write(b"\x40\x00\x00\x00\x01\x02\x03")  # an append that never returned
    reopened = open_graph(tmp_path)
    saved.append(reopened.remember(remember_body("after the tear", ["whole"]))["saved"])
    _kill(reopened)
    final = open_graph(tmp_path)
    try:
        assert final.get_memories({"ids": saved})["missing"] == []
        assert final.counts({})["memories"] == 3
    finally:
        final.close()


def test_the_feed_serves_a_write_before_it_reaches_the_file(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    try:
        first = graph.remember(remember_body("in the file", ["file"]))
        graph.flush_due()
        second = graph.remember(remember_body("only in the log", ["log"]))
        assert graph.store.pending
        feed = graph.feed_since({"seq": 0})
        assert [e["id"] for e in feed["events"]] == [first["saved"], second["saved"]]
        assert [e["seq"] for e in feed["events"]] == [first["seq"], second["seq"]]
        assert feed["events"][1]["doc"]["content"] == "only in the log"
        assert graph.feed_since({"seq": first["seq"]})["events"][0]["id"] == second["saved"]
        graph.flush_due()
        assert graph.feed_since({"seq": 0}) == feed
    finally:
        graph.close()


class CountedStatements:
    """A DuckDB connection that keeps every statement it runs."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.statements: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)

    def execute(self, sql: str, *args: Any) -> Any:
        self.statements.append(sql)
        return self.conn.execute(sql, *args)


def test_a_feed_reader_past_the_file_reads_the_log_alone_until_a_fold(tmp_path: Path) -> None:
    """The lexicon polls the feed from its last seq while writes wait in the log: those polls
    run no statement, and once a fold moves the writes into the file, the same poll reads them
    there (a poll that kept skipping the file would lose them from search for good)."""
    graph = open_graph(tmp_path)
    counted = CountedStatements(graph.store.conn)
    graph.store.conn = counted  # type: ignore[assignment]
    try:
        head = graph.remember(remember_body("in the file", ["file"]))["seq"]
        graph.flush_due()
        assert graph.feed_since({"seq": head})["events"] == []
        logged = [graph.remember(remember_body(f"logged {i}", [f"log{i}"])) for i in range(2)]
        counted.statements.clear()
        for _ in range(3):
            polled = graph.feed_since({"seq": head})["events"]
            assert [e["id"] for e in polled] == [w["saved"] for w in logged]
        assert counted.statements == []
        graph.flush_due()
        assert not graph.store.pending
        folded = graph.feed_since({"seq": head})["events"]
        assert [e["id"] for e in folded] == [w["saved"] for w in logged]
        assert [e["seq"] for e in folded] == [w["seq"] for w in logged]
        assert graph.feed_since({"seq": logged[0]["seq"]})["events"] == folded[1:]
    finally:
        graph.store.conn = counted.conn
        graph.close()


def test_writes_folded_together_leave_the_file_as_memory_has_them(tmp_path: Path) -> None:
    """A save, its exact re-save (which supersedes it), a correction, a forget and reads that
    move link weights, all in one fold: the file reopens to the same memories."""
    graph = open_graph(tmp_path)
    first = graph.remember(remember_body("The build uses Bazel", ["build", "bazel"]))["saved"]
    again = graph.remember(remember_body("The build uses Bazel", ["build"]))
    doomed = graph.remember(remember_body("A passing thought", ["thought"]))["saved"]
    corrected = graph.correct({"memory_id": again["saved"], "content": "The build uses Make"})
    graph.forget({"memory_id": doomed})
    graph.read_memory({"memory_id": corrected["new_id"]})
    assert len(graph.store.pending) == 6
    ids = [first, again["saved"], doomed, corrected["new_id"]]
    now = time.time()
    before = _views(graph, ids, now)
    graph.close()
    reopened = open_graph(tmp_path)
    try:
        assert _views(reopened, ids, now) == before
        assert [v["id"] for v in before] == [first, again["saved"], corrected["new_id"]]
    finally:
        reopened.close()


def test_a_log_left_by_another_file_is_set_aside_not_applied(tmp_path: Path) -> None:
    """A graph file deleted to start afresh (or a backup copied in its place) while its log
    still held writes: the new file's epoch differs, so the log is kept aside, not replayed."""
    graph = open_graph(tmp_path)
    graph.remember(remember_body("from the old file", ["old"]))
    _kill(graph)
    (tmp_path / GRAPH_FILE).unlink()
    for stale in tmp_path.glob(f"{GRAPH_FILE}.wal"):
        stale.unlink()
    fresh = open_graph(tmp_path)
    try:
        assert fresh.counts({})["memories"] == 0
        assert len(list(tmp_path.glob(f"{log_path(tmp_path / GRAPH_FILE).name}.other-*"))) == 1
        saved = fresh.remember(remember_body("from the new file", ["new"]))["saved"]
    finally:
        fresh.close()
    reopened = open_graph(tmp_path)
    try:
        assert reopened.get_memories({"ids": [saved]})["missing"] == []
        assert reopened.counts({})["memories"] == 1
    finally:
        reopened.close()


def test_a_fold_carries_every_kind_of_row_a_write_made() -> None:
    """``Changes.absorb`` names each kind of row by hand: a kind added to ``Changes`` and not
    absorbed would be acknowledged, logged, and then left out of DuckDB by the fold."""
    import dataclasses
    from types import SimpleNamespace

    from keymem.store.changes import Changes

    later = Changes()
    for spec in dataclasses.fields(Changes):
        current = getattr(later, spec.name)
        if isinstance(current, dict):
            row: Any = SimpleNamespace(id=f"{spec.name}-row")
            key: Any = (spec.name, "memory") if spec.name.endswith("links") else f"{spec.name}-row"
            current[key] = row
        elif isinstance(current, set):
            current.add(f"{spec.name}-row")
        elif isinstance(current, list):
            current.append(("row", spec.name))
        else:
            setattr(later, spec.name, 1)
    merged = Changes()
    merged.absorb(later)
    empty = Changes()
    missing = [
        spec.name
        for spec in dataclasses.fields(Changes)
        if getattr(merged, spec.name) == getattr(empty, spec.name)
    ]
    assert missing == []


def test_a_burst_of_writes_is_folded_together_once_it_pauses(tmp_path: Path) -> None:
    """The worker's write-behind timer leaves a burst's writes logged while they keep coming
    (one fold for the burst, not one every 0.2 s) and folds them all once they pause."""
    graph = open_graph(tmp_path)
    try:
        for i in range(6):
            graph.remember(remember_body(f"burst fact {i}", ["burst"]))
            graph.fold_due()  # as the worker's timer runs between requests
            time.sleep(0.05)
        assert len(graph.store.pending) == 6
        time.sleep(WRITE_BEHIND_INTERVAL_S)
        graph.fold_due()
        assert not graph.store.pending
        folded = graph.store.conn.execute(
            "SELECT count(*) FROM memories WHERE content LIKE 'burst fact %'"
        ).fetchone()
        assert folded == (6,)
    finally:
        graph.close()
