"""The graph's per-namespace sizes (``counts``, ``list_memories``) come from tallies the state
keeps as it changes, not from a walk: after every kind of change, on a real graph file and
after a restart, they equal a recount of the whole graph, expired memories included."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from keymem.services.graph import GraphService
from keymem.services.graph.views import COUNT_FIELDS
from tests.graph_helpers import open_graph
from tests.test_sleep import open_unmerging, remember, run_sleep
from tests.vectors import remember_body

TTL_S = 1.0


def recount(graph: GraphService, now: float) -> dict[str, dict[str, int]]:
    """The oracle: every namespace's sizes by walking every memory and key."""
    state = graph.state
    rows: dict[str, dict[str, int]] = {}

    def row_of(ns: str) -> dict[str, int]:
        return rows.setdefault(ns, dict.fromkeys(COUNT_FIELDS, 0))

    for memory in state.memories.values():
        row = row_of(memory.namespace)
        row["versions"] += 1
        row["memories"] += memory.active(now)
        row["links"] += len(state.mem_links[memory.id])
    for key in state.keys.values():
        row_of(key.namespace)["keys"] += 1
    return {ns: row for ns, row in rows.items() if any(row.values())}


def listed(graph: GraphService, namespace: str, include_inactive: bool) -> list[str]:
    page: dict[str, Any] = graph.list_memories(
        {"namespace": namespace, "include_inactive": include_inactive, "limit": 200}
    )
    return [row["id"] for row in page["memories"]]


def check(graph: GraphService) -> dict[str, dict[str, int]]:
    """counts and list_memories agree with the recount; returns the counts."""
    now = time.time()
    answer = graph.counts({})
    expected = recount(graph, now)
    assert answer["namespaces"] == expected
    for field in COUNT_FIELDS:
        assert answer[field] == sum(row[field] for row in expected.values())
    for namespace in expected:
        assert graph.counts({"namespace": namespace})["namespaces"] == {
            namespace: expected[namespace]
        }
        every = [m for m in graph.state.memories.values() if m.namespace == namespace]
        newest = sorted(every, key=lambda m: (m.created_at, m.id), reverse=True)
        assert listed(graph, namespace, True) == [m.id for m in newest]
        assert listed(graph, namespace, False) == [m.id for m in newest if m.active(now)]
        browsed = graph.browse_keys({"namespace": namespace})
        assert browsed["memory_count"] == expected[namespace]["memories"]
    return expected


def test_counts_equal_a_recount_through_every_kind_of_change(tmp_path: Path) -> None:
    graph = open_unmerging(tmp_path)  # keys that only sleep merges
    try:
        check(graph)  # empty
        first = remember(graph, "the invoice goes out by e-mail", ["e-mail", "invoice"])
        remember(graph, "send the receipt by email", ["email", "receipt"])
        remember(graph, "the car is parked downstairs", ["car", "automobile"], same_vector=True)
        shop = graph.remember(
            remember_body("The shop uses PostgreSQL 16", ["postgres", "database"], namespace="shop")
        )["saved"]
        gone = graph.remember(
            remember_body("The shop closes at noon", ["closing", "noon"], namespace="shop")
        )["saved"]
        assert check(graph)["shop"]["memories"] == 2
        corrected = graph.correct({"memory_id": first, "content": "invoices go out by post"})
        assert corrected["new_id"] != first  # a version chain: one more version, same active
        graph.read_memory({"memory_id": shop, "namespace": "shop"})
        check(graph)
        graph.forget({"memory_id": gone, "namespace": "shop"})
        assert check(graph)["shop"]["versions"] == 1
        lapsing = graph.remember(
            remember_body("A note that lapses", ["lapse"], namespace="temp", ttl_seconds=TTL_S)
        )["saved"]
        # the new version keeps the expiry: both versions lapse, one of them superseded
        graph.correct({"memory_id": lapsing, "namespace": "temp", "content": "A lapsing note"})
        assert check(graph)["temp"]["memories"] == 1
    finally:
        graph.close()
    graph = open_graph(tmp_path)  # the tallies rebuilt from the file
    try:
        before = check(graph)
        report = run_sleep(graph)  # key merges move links between keys
        assert report["merged_keys"] >= 1
        after = check(graph)
        assert after["default"]["keys"] < before["default"]["keys"]
        time.sleep(TTL_S)  # the lapsing note expires and is counted out before the sweep
        expired = check(graph)
        assert expired["temp"] == {**before["temp"], "memories": 0}
        graph.sweep()
        assert "temp" not in check(graph)
        graph.drop_namespace({"namespace": "shop"})
        final = check(graph)
        assert "shop" not in final and final["default"] == after["default"]
    finally:
        graph.close()
    graph = open_graph(tmp_path)
    try:
        assert check(graph) == final
    finally:
        graph.close()
