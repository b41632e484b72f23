"""A keyed write commits once: a retry, even after a restart, gets the first commit's result."""

from __future__ import annotations

from pathlib import Path

import pytest

from keymem.protocol.errors import BadRequest, Conflict
from keymem.services.graph.idempotency import KEY_FIELD
from tests.graph_helpers import key_id_of, open_graph
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
