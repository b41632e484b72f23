"""The event journal: day files that are bounded, read back by window, and fed by the graph's
committed writes (never by rejected or replayed ones) on a real graph file."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from keymem.protocol.errors import BadRequest, NotFound
from keymem.services import journal
from keymem.services.graph.idempotency import KEY_FIELD
from keymem.services.journal import Journal, read_events
from tests.graph_helpers import key_id_of, open_graph
from tests.vectors import remember_body

DAY_S = 86_400.0
# 2026-03-01 12:00 UTC
NOON = 1_772_366_400.0


class Clock:
    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def test_events_land_in_day_files_and_read_back_by_window(tmp_path: Path) -> None:
    clock = Clock(NOON)
    recorder = Journal(tmp_path, "memory", clock)
    recorder.record("inject", ms=12.5, outcome="shown")
    clock.at = NOON + DAY_S
    recorder.record("inject", ms=30.0, outcome="silent")
    assert not journal.journal_dir(tmp_path).exists()  # nothing written before a flush
    recorder.flush()
    names = sorted(p.name for p in journal.journal_dir(tmp_path).iterdir())
    assert names == ["2026-03-01.memory.jsonl", "2026-03-02.memory.jsonl"]
    everything = list(read_events(tmp_path, NOON - 1))
    assert [(e["kind"], e["outcome"], e["source"]) for e in everything] == [
        ("inject", "shown", "memory"),
        ("inject", "silent", "memory"),
    ]
    assert [e["outcome"] for e in read_events(tmp_path, NOON + 1)] == ["silent"]
    assert [e["outcome"] for e in read_events(tmp_path, 0, NOON + 1)] == ["shown"]


def test_a_torn_line_is_skipped_and_the_rest_read(tmp_path: Path) -> None:
    recorder = Journal(tmp_path, "graph", Clock(NOON))
    recorder.record("remember", n=1)
    recorder.flush()
    day_file = journal.journal_dir(tmp_path) / "2026-03-01.graph.jsonl"
    with day_file.open("a") as f:
        f.write('{"t": 1772366400.5, "kind": "rem')  # killed mid-line
    recorder.record("forget", n=2)
    recorder.flush()
    kinds = [e["kind"] for e in read_events(tmp_path, 0)]
    assert kinds == ["remember"]  # the torn line swallowed the next one's start, nothing else
    assert day_file.stat().st_mode & 0o777 == 0o600


def test_old_days_are_pruned_and_recent_ones_kept(tmp_path: Path) -> None:
    for days_ago in (0, journal.RETENTION_DAYS - 1, journal.RETENTION_DAYS + 1, 400):
        recorder = Journal(tmp_path, "graph", Clock(NOON - days_ago * DAY_S))
        recorder.record("remember", n=days_ago)
        recorder.flush()
    assert journal.prune(tmp_path, NOON) == 2
    kept = sorted(e["n"] for e in read_events(tmp_path, 0))
    assert kept == [0, journal.RETENTION_DAYS - 1]


def test_a_full_day_file_takes_no_more_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal, "DAY_FILE_MAX_BYTES", 200)
    recorder = Journal(tmp_path, "memory", Clock(NOON))
    for _ in range(3):
        for _ in range(5):
            recorder.record("search", ms=1.0, found=1, abstained=False)
        recorder.flush()
    size = (journal.journal_dir(tmp_path) / "2026-03-01.memory.jsonl").stat().st_size
    assert 200 <= size < 400  # one flush crossed the cap, none after it


def test_recording_from_many_threads_loses_nothing(tmp_path: Path) -> None:
    recorder = Journal(tmp_path, "memory")
    per_thread = 500

    def work(n: int) -> None:
        for i in range(per_thread):
            recorder.record("recall", thread=n, i=i)
            if i % 100 == 0:
                recorder.flush()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    recorder.flush()
    seen = {(e["thread"], e["i"]) for e in read_events(tmp_path, 0)}
    assert len(seen) == 4 * per_thread


def test_an_unknown_source_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="journal source"):
        Journal(tmp_path, "hook")


def _graph_events(home: Path) -> list[dict[str, object]]:
    return [e for e in read_events(home, 0) if e["source"] == "graph"]


def test_the_graph_journals_committed_writes_only(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    body = remember_body("the user likes strawberries", ["strawberry"], namespace="shop")
    keyed = {**body, KEY_FIELD: "k-1"}
    saved = graph.write_group(graph.prepare_remember, [keyed], "remember")[0]["saved"]
    graph.write_group(graph.prepare_remember, [keyed], "remember")  # a retry: replayed
    graph.write_group(graph.prepare_remember, [body], "remember")  # same text: deduplicated
    with pytest.raises(BadRequest):
        graph.remember({"content": "no keys", "keys": "strawberry"})  # refused: nothing
    current = graph.state.memories[saved].superseded_by
    assert current is not None
    key_id = key_id_of(graph, "strawberry", "shop")
    graph.read_memory({"memory_id": current, "namespace": "shop", "via_key_id": key_id})
    graph.confirm_memory({"memory_id": current, "namespace": "shop", "evidence": "user"})
    graph.dismiss({"memory_id": current, "namespace": "shop", "key_id": key_id})
    with pytest.raises(NotFound):
        graph.forget({"memory_id": current, "namespace": "default"})  # another namespace
    graph.forget({"memory_id": current, "namespace": "shop"})
    graph.close()  # flushes
    events = _graph_events(tmp_path)
    summary = [(e["kind"], e.get("ns"), e.get("n"), e.get("dedup")) for e in events]
    assert summary == [
        ("remember", "shop", 1, 0),
        ("remember", "shop", 1, 1),
        ("read", "shop", None, None),
        ("confirm", "shop", None, None),
        ("dismiss", "shop", None, None),
        ("forget", None, 2, None),  # the current version and the one it superseded
    ]
    read, confirm = events[2], events[3]
    assert read["via_key"] is True
    assert confirm["new"] is True
    lines = (journal.journal_dir(tmp_path)).glob("*.jsonl")
    text = "".join(p.read_text() for p in lines)
    assert "strawberr" not in text  # counts and flags, never content or keys


def test_the_graph_journals_hebbian_changes(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    hit = graph.remember(remember_body("tea is served at five", ["tea", "afternoon"]))["saved"]
    shown = graph.remember(remember_body("tea comes from china", ["tea", "china"]))["saved"]
    graph.remember(remember_body("coffee at nine", ["coffee"]))  # so 'tea' is specific
    tea = key_id_of(graph, "tea")
    graph.read_memory({"memory_id": shown, "via_key_id": tea})  # lifts it above its start
    result = graph.reinforce_path(
        {"namespace": "default", "hit": hit, "keys": [tea], "explored": [shown]}
    )
    graph.close()
    (event,) = [e for e in _graph_events(tmp_path) if e["kind"] == "hebbian"]
    assert event["strengthened"] == len(result["reinforced"]) >= 1
    assert event["decayed"] == len(result["decayed"]) >= 1
    assert event["ns"] == "default"


def test_events_written_by_a_process_are_plain_json_lines(tmp_path: Path) -> None:
    recorder = Journal(tmp_path, "graph", Clock(NOON))
    recorder.record("sleep", merged_keys=3, decayed_links=10, flagged=1)
    recorder.flush()
    (line,) = (journal.journal_dir(tmp_path) / "2026-03-01.graph.jsonl").read_text().splitlines()
    assert json.loads(line) == {
        "t": NOON,
        "kind": "sleep",
        "merged_keys": 3,
        "decayed_links": 10,
        "flagged": 1,
    }
