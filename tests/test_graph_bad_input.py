"""Bad input gets a typed error and changes nothing: not the memory, not the file, not the feed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from keymem.protocol.errors import BadRequest, KeymemError, NotFound, TooLarge
from keymem.protocol.limits import CONTENT_MAX_CHARS, KEYS_PER_MEMORY_MAX
from keymem.services.graph import GraphService
from tests.graph_helpers import GRAPH_FILE, key_id_of, open_graph, table_counts
from tests.vectors import remember_body, vectors


@pytest.fixture
def graph(tmp_path: Path) -> Iterator[GraphService]:
    service = open_graph(tmp_path)
    service.remember(remember_body("Existing fact about tea", ["tea", "drink"]))
    service.remember(remember_body("Another fact", ["tea"], namespace="work"))
    yield service
    service.close()


def _snapshot(graph: GraphService) -> tuple[Any, ...]:
    state = graph.state
    return (
        state.head_seq,
        sorted(state.memories),
        sorted(state.keys),
        sorted((k, m, ln.weight) for k, ms in state.key_links.items() for m, ln in ms.items()),
        sorted((m.id, m.depth, m.access_count) for m in state.memories.values()),
    )


def _body(**changes: Any) -> dict[str, Any]:
    body = remember_body("A new fact", ["fresh key", "tea"])
    body.update(changes)
    return body


def _bad_cases(graph: GraphService) -> list[tuple[str, Callable[[], Any], type[KeymemError]]]:
    tea = key_id_of(graph, "tea")
    existing = next(iter(graph.state.memories))
    work_memory = next(m.id for m in graph.state.memories.values() if m.namespace == "work")
    item = remember_body("ok item", ["fine"])
    return [
        ("body not an object", lambda: graph.remember(["x"]), BadRequest),
        ("content missing", lambda: graph.remember(_body(content="  ")), BadRequest),
        (
            "content over the limit",
            lambda: graph.remember(_body(content="x" * (CONTENT_MAX_CHARS + 1))),
            TooLarge,
        ),
        (
            "too many keys",
            lambda: graph.remember(
                remember_body("many keys", [f"key {i}" for i in range(KEYS_PER_MEMORY_MAX + 1)])
            ),
            BadRequest,
        ),
        (
            "non-string key",
            lambda: graph.remember(
                {"content": "c", "keys": ["ok", 7], "key_vectors": vectors(["ok", "ok"])}
            ),
            BadRequest,
        ),
        (
            "all keys unusable",
            lambda: graph.remember(remember_body("keyless", ["x", " "])),
            BadRequest,
        ),
        (
            "vectors of the wrong shape",
            lambda: graph.remember(_body(key_vectors=np.ones((2, 7), dtype=np.float32))),
            BadRequest,
        ),
        (
            "vectors as a list",
            lambda: graph.remember(_body(key_vectors=[[0.1] * 512] * 2)),
            BadRequest,
        ),
        (
            "phrase vectors of the wrong width",
            lambda: graph.match_keys({"phrase_vectors": np.ones((2, 7), dtype=np.float32)}),
            BadRequest,
        ),
        (
            "a zero phrase vector",
            lambda: graph.match_keys({"phrase_vectors": np.zeros((1, 512), dtype=np.float32)}),
            BadRequest,
        ),
        (
            "a phrase cosine floor outside [-1, 1]",
            lambda: graph.match_keys(
                {
                    "phrase_vectors": np.ones((1, 512), dtype=np.float32),
                    "phrase_min_cosine": 2,
                }
            ),
            BadRequest,
        ),
        (
            "an experiment knob (scoring is the service's, not the request's)",
            lambda: graph.recall_candidates({"text": "apple", "phrase_links": "all"}),
            BadRequest,
        ),
        (
            "invalid decay profile",
            lambda: graph.remember(_body(decay_profile="forever")),
            BadRequest,
        ),
        ("negative ttl", lambda: graph.remember(_body(ttl_seconds=-5)), BadRequest),
        ("unknown key type", lambda: graph.remember(_body(key_types={"tea": "verb"})), BadRequest),
        (
            "unknown related id",
            lambda: graph.remember(_body(related_to=["000000000000"])),
            NotFound,
        ),
        (
            "related id in another namespace",
            lambda: graph.remember(_body(related_to=[work_memory])),
            NotFound,
        ),
        (
            "batch with one bad item",
            lambda: graph.remember_batch({"items": [item, {**item, "ttl_seconds": 0}]}),
            BadRequest,
        ),
        (
            "unknown memory on correct",
            lambda: graph.correct({"memory_id": "nope", "content": "x"}),
            NotFound,
        ),
        (
            "correct in the wrong namespace",
            lambda: graph.correct({"memory_id": work_memory, "content": "x", "namespace": "home"}),
            NotFound,
        ),
        ("read unknown memory", lambda: graph.read_memory({"memory_id": "abc"}), NotFound),
        (
            "read through a key not linked",
            lambda: graph.read_memory(
                {"memory_id": work_memory, "via_key_id": tea, "namespace": "work"}
            ),
            BadRequest,
        ),
        ("read_key of unknown key", lambda: graph.read_key({"key_id": "python"}), NotFound),
        (
            "read_key limit too big",
            lambda: graph.read_key({"key_id": tea, "limit": 500}),
            BadRequest,
        ),
        (
            "dismiss unknown link",
            lambda: graph.dismiss({"memory_id": work_memory, "key_id": tea}),
            NotFound,
        ),
        (
            "confirm with bad evidence",
            lambda: graph.confirm_memory({"memory_id": existing, "evidence": "hunch"}),
            BadRequest,
        ),
        ("forget unknown memory", lambda: graph.forget({"memory_id": "zzz"}), NotFound),
        (
            "forget in the wrong namespace",
            lambda: graph.forget({"memory_id": work_memory, "namespace": "default"}),
            NotFound,
        ),
        ("feed from the future", lambda: graph.feed_since({"seq": 10_000}), KeymemError),
        (
            "match with a wrong-size vector",
            lambda: graph.match_keys({"vector": np.ones(3, np.float32)}),
            BadRequest,
        ),
    ]


def test_every_bad_input_is_a_typed_error_and_changes_nothing(
    graph: GraphService, tmp_path: Path
) -> None:
    before = _snapshot(graph)
    failures = []
    for name, call, expected in _bad_cases(graph):
        with pytest.raises(KeymemError) as caught:
            call()
        if not isinstance(caught.value, expected):
            failures.append(f"{name}: {type(caught.value).__name__} ({caught.value})")
        assert _snapshot(graph) == before, f"{name} changed the graph"
    assert failures == []
    graph.close()
    on_disk = table_counts(tmp_path / GRAPH_FILE)
    reopened = open_graph(tmp_path)
    try:
        assert _snapshot(reopened) == before
    finally:
        reopened.close()
    assert on_disk["memories"] == 2 and on_disk["events"] == 2


def test_vectors_of_another_dimension_are_refused_after_the_first_write(
    graph: GraphService,
) -> None:
    short = np.ones((1, 256), dtype=np.float32)
    with pytest.raises(BadRequest, match="dimension"):
        graph.remember({"content": "x", "keys": ["dim test"], "key_vectors": short})
    assert graph.fingerprint({}) == {"fingerprint": None, "dim": 512}
