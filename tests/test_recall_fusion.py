"""The router's final fusion on hand-made pools: no services, every number checkable by hand."""

from __future__ import annotations

from typing import Any

import pytest

from keymem.protocol.errors import BadRequest
from keymem.services.memory.search import (
    RERANK_MAX_PASSAGES,
    Relevance,
    Search,
    Tuning,
    fuse_blend,
    min_max,
)


def candidate(
    name: str, *, key: float = 0.0, bm25: float = 0.0, hop: float = 0.0, factor: float = 1.0
) -> dict[str, Any]:
    return {
        "memory_id": name,
        "score": 0.0,
        "components": {
            "key_path": key,
            "key_rank": 1 if key else None,
            "bm25_score": bm25,
            "bm25_rank": 1 if bm25 else None,
            "literal": False,
            "hop": 1 if hop else 0,
            "hop_score": hop,
            "factor": factor,
        },
    }


def order(fused: list[dict[str, Any]]) -> list[str]:
    return [c["memory_id"] for c in fused]


def test_min_max_maps_the_pool_onto_unit_range_and_flat_pools_onto_zero() -> None:
    assert min_max([2.0, 4.0, 3.0]) == [0.0, 1.0, 0.5]
    assert min_max([0.3, 0.3]) == [0.0, 0.0]
    assert min_max([]) == []


def test_a_strong_bm25_margin_survives_a_reranker_that_mildly_disagrees() -> None:
    # RRF would tie these (each first in one list); the blend keeps BM25's wide margin.
    pool = [candidate("a", bm25=20.0), candidate("b", bm25=2.0), candidate("c", bm25=1.0)]
    fused = fuse_blend(pool, Relevance([0.40, 0.42, 0.10], "embedding_cosine"), Tuning())
    assert order(fused) == ["a", "b", "c"]
    assert fused[0]["score_kind"] == "blended_evidence"
    assert fused[0]["rerank_score"] == 0.40


def test_a_hop_counts_only_as_far_as_the_reached_memory_looks_relevant() -> None:
    pool = [candidate("seed", key=1.0, bm25=5.0), candidate("far", hop=0.2)]
    irrelevant = Relevance([0.9, 0.1], "embedding_cosine")
    gated = fuse_blend(pool, irrelevant, Tuning(hop_gate="relevance"))
    assert gated[1]["memory_id"] == "far" and gated[1]["score"] == 0.0
    ungated = fuse_blend(pool, irrelevant, Tuning())  # the default: not gated
    assert ungated[1]["score"] == 1.0  # the hop's own normalised score


def test_without_a_reranker_the_graph_evidence_alone_decides() -> None:
    pool = [candidate("a", key=0.5), candidate("b", key=0.5, bm25=3.0, factor=0.5)]
    fused = fuse_blend(pool, None, Tuning())
    assert order(fused) == ["b", "a"]  # (1 + 1) × 0.5 against 1
    assert "rerank_score" not in fused[0] and fused[0]["score_kind"] == "blended_evidence"


def test_tuning_rejects_unknown_knobs_and_out_of_range_weights() -> None:
    with pytest.raises(BadRequest):
        Tuning.parse({"fusion": "magic"})
    with pytest.raises(BadRequest):
        Tuning.parse({"dense_weight": -1})
    with pytest.raises(BadRequest):
        Tuning.parse({"colour": "blue"})
    assert Tuning.parse(None) == Tuning()


def test_link_weighting_gives_auto_key_evidence_back_its_half_weight() -> None:
    # two memories whose key paths normalise to the same 1.0: one via an agent's key, one via
    # an auto-key (half a link); BM25 prefers the auto-keyed one a little
    agent, auto = candidate("agent", key=2.0, bm25=1.0), candidate("auto", key=2.0, bm25=1.2)
    agent["components"]["key_link"], auto["components"]["key_link"] = 1.0, 0.5
    other = candidate("other", bm25=1.6)  # no key at all
    pool = [agent, auto, other]
    assert order(fuse_blend(pool, None, Tuning(link_weighted=False))) == ["auto", "agent", "other"]
    weighted = fuse_blend(pool, None, Tuning())  # the default weighs links
    assert order(weighted) == ["agent", "other", "auto"]
    assert weighted[2]["score"] == pytest.approx(0.5 + 1 / 3, abs=1e-6)


def test_a_pool_larger_than_one_reranker_call_is_scored_in_pieces() -> None:
    class Reranker:
        def __init__(self) -> None:
            self.sizes: list[int] = []

        def call_many(self, calls: list[Any], timeout_ms: int) -> list[Any]:
            replies = []
            for _, _, body in calls:
                self.sizes.append(len(body["passages"]))
                scores = [float(p.removeprefix("p")) for p in body["passages"]]
                replies.append({"scores": scores, "score_kind": "embedding_cosine"})
            return replies

    client = Reranker()
    recall = Search(client, None)  # type: ignore[arg-type]
    pool = [{"content": f"p{i}"} for i in range(RERANK_MAX_PASSAGES + 6)]
    relevance = recall._relevance("query", pool, {})
    assert client.sizes == [RERANK_MAX_PASSAGES, 6]
    assert relevance is not None and relevance.scores == [float(i) for i in range(len(pool))]
