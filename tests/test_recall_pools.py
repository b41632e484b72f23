"""The pool re-fusion benchmark: which variants a dumped pool can answer, and that it ranks as
the router does (hand-made pools; the dump itself runs the real stack in
``python -m benchmarks.recall_pools dump``)."""

from __future__ import annotations

from typing import Any

from benchmarks.recall_ablation import VARIANTS
from benchmarks.recall_pools import captured_pools, pool_of, refused, router_side
from keymem.services.memory import search
from keymem.services.memory.search import Fusion


def dumped(name: str, *, bm25: float, relevance: float, about: float | None) -> dict[str, Any]:
    return {
        "memory_id": name,
        "score": 0.0,
        "components": {"key_path": 0.0, "bm25_score": bm25, "hop_share": 0.0, "factor": 1.0},
        "benchmark_ids": [f"bench-{name}"],
        "relevance": relevance,
        "about_relevance": about,
        "keys": [],
    }


def row(pool: list[dict[str, Any]]) -> dict[str, Any]:
    return {"query": {"query": "what does Melanie paint?"}, "keys": [], "pool": pool}


def test_only_variants_that_change_the_routers_fusion_can_be_re_fused() -> None:
    usable = router_side(VARIANTS)
    assert {"shipped", "no_about", "hops_over_lender", "before"} <= usable.keys()
    # another pool (hops, pool size), another graph scoring, another relevance model: no
    assert not {"hops0", "pool30", "no_named_hops", "seeds3", "e5_blend"} & usable.keys()


def test_a_re_fused_pool_ranks_as_the_router_and_reads_the_about_only_when_asked() -> None:
    # "b"'s text reads far from the query and its writer's keys close; "a" the other way
    pool = [
        dumped("a", bm25=1.0, relevance=0.5, about=0.1),
        dumped("b", bm25=1.0, relevance=0.2, about=0.6),
        dumped("c", bm25=1.0, relevance=0.4, about=None),
    ]
    usable = router_side(VARIANTS)
    assert refused(row(pool), usable["shipped"], 64) == ["bench-b", "bench-a", "bench-c"]
    assert refused(row(pool), usable["no_about"], 64) == ["bench-a", "bench-c", "bench-b"]
    # the first candidates of the graph's order are the smaller pool
    assert refused(row(pool), usable["no_about"], 2) == ["bench-a", "bench-b"]


def test_a_merged_duplicate_stands_for_each_of_its_benchmark_ids_once() -> None:
    merged = dumped("a", bm25=2.0, relevance=0.5, about=None)
    merged["benchmark_ids"] = ["bench-a", "bench-a2"]
    pool = [merged, dumped("b", bm25=1.0, relevance=0.4, about=None)]
    assert refused(row(pool), router_side(VARIANTS)["shipped"], 64) == [
        "bench-a",
        "bench-a2",
        "bench-b",
    ]


def test_the_dump_sees_the_pool_the_router_fuses_with_the_persons_the_question_names() -> None:
    # "a" is about someone else than the question's person: its key evidence does not count
    about_other = dumped("a", bm25=0.6, relevance=0.5, about=None)
    about_other["components"]["key_path"] = 1.0
    about_other["subject"] = "caroline"
    own = dumped("b", bm25=1.0, relevance=0.5, about=None)
    unrelated = dumped("c", bm25=0.0, relevance=0.5, about=None)
    pool = [about_other, own, unrelated]
    with captured_pools() as seen:
        ranked = search.fuse_blend(pool, None, Fusion(), frozenset({"melanie"}))
    assert [c["memory_id"] for c in ranked] == ["b", "a", "c"]
    assert [[c["memory_id"] for c in pool] for pool, _ in seen] == [["a", "b", "c"]]


def test_a_cut_pool_keeps_what_the_dense_leg_appended_past_the_graphs_cut() -> None:
    graph = [dumped(name, bm25=1.0, relevance=0.1, about=None) for name in "abcd"]
    graph[3]["components"]["dense_rank"] = 2  # in the graph's order, below a pool of 2
    appended = dumped("e", bm25=0.0, relevance=0.9, about=None)
    appended["components"]["dense_rank"] = 1
    pool = pool_of(row([*graph, appended]), 2)
    assert [c["memory_id"] for c in pool] == ["a", "b", "e", "d"]  # "c": cut, not proposed
    assert refused(row([*graph, appended]), router_side(VARIANTS)["shipped"], 2)[0] == "bench-e"
