"""A keyed write commits once: a retry, even after a restart, gets the first commit's result."""

from __future__ import annotations

import time
from pathlib import Path

import duckdb
import pytest

from keymem.protocol.codec import pack
from keymem.protocol.errors import BadRequest, Conflict
from keymem.services.graph.idempotency import KEY_FIELD, RETAINED_S
from keymem.store.schema import MIGRATIONS
from tests.graph_helpers import GRAPH_FILE, key_id_of, open_graph
from tests.vectors import remember_body


def test_a_retried_remember_returns_the_first_commit_and_writes_nothing(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    body = remember_body("the user likes strawberries", ["strawberry"], **{KEY_FIELD: "k-1"})
    first = graph.write_group(graph.prepare_remember, [body], "remember")[0]
    again = graph.write_group(graph.prepare_remember, [body], "remember")[0]
    assert again["saved"] == first["saved"]
    assert len(graph.state.memories) == 1
    graph.close()
    reopened = open_graph(tmp_path)  # the key was committed with the write
    after_restart = reopened.write_group(reopened.prepare_remember, [body], "remember")[0]
    assert after_restart["saved"] == first["saved"]
    assert len(reopened.state.memories) == 1
    reopened.close()


def test_the_same_key_twice_in_one_group_is_one_write(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    body = remember_body("the meeting is on friday", ["meeting"], **{KEY_FIELD: "k-2"})
    one, two = graph.write_group(graph.prepare_remember, [body, body], "remember")
    assert one["saved"] == two["saved"]
    assert len(graph.state.memories) == 1
    graph.close()


def test_unkeyed_writes_and_other_keys_still_write(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    plain = remember_body("tea at five", ["tea"])
    keyed = remember_body("tea at five", ["tea"], **{KEY_FIELD: "k-3"})
    other = remember_body("tea at five", ["tea"], **{KEY_FIELD: "k-4"})
    results = [
        graph.write_group(graph.prepare_remember, [b], "remember")[0] for b in (plain, keyed, other)
    ]
    assert len({r["saved"] for r in results}) == 3  # exact-text dedup supersedes, ids differ
    graph.close()


def test_a_key_reused_for_another_method_or_malformed_is_refused(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    saved = graph.write_group(
        graph.prepare_remember,
        [remember_body("xylophone lessons", ["xylophone"], **{KEY_FIELD: "k-5"})],
        "remember",
    )[0]["saved"]
    forget = {"memory_id": saved, KEY_FIELD: "k-5"}
    (reused,) = graph.write_group(graph.prepare_forget, [forget], "forget")
    assert isinstance(reused, Conflict)
    for bad in ("", "k" * 129, 7):
        (refused,) = graph.write_group(
            graph.prepare_remember,
            [remember_body("yoga", ["yoga"], **{KEY_FIELD: bad})],
            "remember",
        )
        assert isinstance(refused, BadRequest)
    assert set(graph.state.memories) == {saved}
    graph.close()


@pytest.mark.parametrize("method", ["forget", "dismiss", "confirm_memory"])
def test_a_retried_write_that_succeeded_is_not_an_error_the_second_time(
    tmp_path: Path, method: str
) -> None:
    graph = open_graph(tmp_path)
    saved = graph.write_group(
        graph.prepare_remember, [remember_body("zebra stripes", ["zebra"])], "remember"
    )[0]["saved"]
    extra = {
        "dismiss": {"key_id": key_id_of(graph, "zebra")},
        "confirm_memory": {"evidence": "user"},
    }
    body = {"memory_id": saved, KEY_FIELD: f"{method}-1", **extra.get(method, {})}
    prepare = getattr(graph, f"prepare_{method}")
    first = graph.write_group(prepare, [body], method)[0]
    second = graph.write_group(prepare, [body], method)[0]
    assert isinstance(first, dict)
    assert isinstance(second, dict), second  # a second forget would otherwise be not_found
    assert {k: v for k, v in second.items() if k != "seq"} == {
        k: v for k, v in first.items() if k != "seq"
    }
    graph.close()
    reopened = open_graph(tmp_path)  # an outcome on an event row or in write_outcomes
    third = reopened.write_group(getattr(reopened, f"prepare_{method}"), [body], method)[0]
    assert isinstance(third, dict), third
    assert {k: v for k, v in third.items() if k != "seq"} == {
        k: v for k, v in first.items() if k != "seq"
    }
    reopened.close()


def _outcome_rows(path: Path) -> tuple[int, int]:
    """(event rows carrying an outcome, write_outcomes rows) of a closed graph file."""
    conn = duckdb.connect(str(path), read_only=True)
    try:
        on_events = conn.execute("SELECT count(outcome_key) FROM events").fetchall()[0][0]
        apart = conn.execute("SELECT count(*) FROM write_outcomes").fetchall()[0][0]
        return int(on_events), int(apart)
    finally:
        conn.close()


def test_a_keyed_remember_keeps_its_outcome_on_its_event_row(tmp_path: Path) -> None:
    """Schema v7: no write_outcomes row (one INSERT fewer) for a write that appends events."""
    graph = open_graph(tmp_path)
    bodies = [
        remember_body(f"fact number {i}", [f"topic{i}"], **{KEY_FIELD: f"ev-{i}"}) for i in range(3)
    ]
    graph.write_group(graph.prepare_remember, bodies, "remember")
    graph.close()
    assert _outcome_rows(tmp_path / GRAPH_FILE) == (3, 0)


def test_outcomes_survive_the_feeds_pruning_and_a_reused_key_gives_its_newest(
    tmp_path: Path,
) -> None:
    graph = open_graph(tmp_path)
    body = remember_body("the boat leaves at noon", ["boat"], **{KEY_FIELD: "k-prune"})
    first = graph.write_group(graph.prepare_remember, [body], "remember")[0]
    graph.ledger.prune(time.time() + RETAINED_S + 1)  # past its retention: the key may be reused
    reused = remember_body("the train leaves at one", ["train"], **{KEY_FIELD: "k-prune"})
    second = graph.write_group(graph.prepare_remember, [reused], "remember")[0]
    assert second["saved"] != first["saved"]
    graph.close()
    assert _outcome_rows(tmp_path / GRAPH_FILE) == (2, 0)
    graph = open_graph(tmp_path)
    graph.state.first_seq = graph.store.prune_events(0, graph.state.head_seq)  # drops both rows
    graph.close()
    assert _outcome_rows(tmp_path / GRAPH_FILE) == (0, 2)  # moved, no key collision
    graph = open_graph(tmp_path)
    again = graph.write_group(graph.prepare_remember, [reused], "remember")[0]
    assert again["saved"] == second["saved"]
    graph.ledger.prune(time.time())  # deletes nothing that is still retained
    graph.close()
    assert _outcome_rows(tmp_path / GRAPH_FILE) == (0, 2)


def test_a_schema_6_file_keeps_its_outcomes_and_events(tmp_path: Path) -> None:
    """A v6 file (outcomes only in write_outcomes, 5-column events) migrates in place: a retry
    is still answered from the first commit, the feed keeps its events, new outcomes ride."""
    path = tmp_path / GRAPH_FILE
    conn = duckdb.connect(str(path))
    for script in MIGRATIONS[:6]:
        for statement in script.split(";"):
            if statement.strip():
                conn.execute(statement)
    conn.execute("INSERT INTO meta VALUES ('schema_version', '6')")
    conn.execute(
        "INSERT INTO events VALUES (1, 'delete', 'gone-memory', 'default', ?)", [time.time()]
    )
    conn.execute(
        "INSERT INTO write_outcomes VALUES ('k-v6', 'remember', ?, ?)",
        [pack({"saved": "m-from-v6"}), time.time()],
    )
    conn.close()
    graph = open_graph(tmp_path)
    assert graph.store.migrated_from == 6
    retried = remember_body("kept from before", ["before"], **{KEY_FIELD: "k-v6"})
    assert graph.write_group(graph.prepare_remember, [retried], "remember")[0]["saved"] == (
        "m-from-v6"
    )
    assert not graph.state.memories
    assert graph.store.events_after(0, 10) == [(1, "delete", "gone-memory")]
    new = remember_body("written after", ["after"], **{KEY_FIELD: "k-v7"})
    graph.write_group(graph.prepare_remember, [new], "remember")
    graph.close()
    assert _outcome_rows(path) == (1, 1)
