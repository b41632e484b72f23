"""Recall orchestration: the router's fan-out to embedder, lexicon, graph and reranker.

Hybrid search (the engine behind inject and ``keymem eval``):

1. analyse — in parallel, the embedder's query vector, the lexicon's BM25 top 50 and the
   query's phrases (then embedded as keys, for matching the one-word auto-keys);
2. graph — key matching, key→memory links, RRF with the BM25 list, depth and freshness factors
   and hops, in one call over the graph's in-memory state (``recall_candidates``);
3. rerank — the reranker scores the pool against the query; the final order blends every
   evidence the pool carries — key path, BM25, reranker relevance, hops — each
   min–max normalised over the pool and summed (``fuse_blend``; why not RRF, and the ablation
   behind it: docs/BENCHMARKS.md, "Recall quality (issue 8)");
4. evidence — a comparison question ("A or B", "둘 다", "비교") gets the best evidence for each
   named entity into the answer, not two passages about the same one.

Degrade, don't fail (invariant 5): without an embedder recall runs on literal keys and BM25,
without a lexicon on keys alone, without a reranker on the fused ranks; each case is reported
in ``degraded``. Without the graph there is nothing to answer from: a typed ``unavailable``.
Each stage gets a share of the caller's remaining time, so one hung service cannot eat the
whole deadline.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import BadRequest, KeymemError
from keymem.protocol.fields import (
    body_of,
    only_fields,
    opt_bool,
    opt_choice,
    opt_int,
    opt_number,
    opt_str,
    req_str,
)
from keymem.protocol.worker import remaining_ms
from keymem.services.graph.hybrid import (
    KEY_AGGREGATES,
    LITERAL_BONUS,
    PHRASE_LINKS,
    RRF_K,
    SEEDS_DEFAULT,
)
from keymem.services.graph.matching import PHRASE_KEYS_MAX, PHRASES_MAX
from keymem.services.graph.requests import MAX_NAMESPACE_CHARS
from keymem.services.graph.text import normalize_namespace
from keymem.services.memory.profile import EmbedderProfile

DEFAULT_BUDGET_MS = 5_000
ANALYSE_SHARE = 0.4  # of the remaining time, for embedder + lexicon together
RERANK_SHARE = 0.5  # of what is left after the graph, for the reranker
RERANK_SEGMENT_CHARS = 600
RERANK_MAX_PASSAGES = 64  # the reranker's limit per call: a bigger pool goes in pieces
MIN_SEGMENT_CHARS = 8
HEAD_SEGMENTS = 2
TAIL_SEGMENTS = 4
SENTENCE_END = re.compile(r"(?<=[.!?。？！])\s+|\n+")
BM25_DEPTH = 50
PHRASE_KEYS_DEFAULT = 2  # nearest keys per query phrase (0 turns phrase matching off)
TOP_K_DEFAULT = 8
TOP_K_MAX = 50
# Candidates the graph hands the reranker: 64, one reranker call (locomo recall@5 0.541 →
# 0.571, longmemeval 0.620 → 0.656, hotpot unchanged; docs/BENCHMARKS.md). Warm passages cost
# dot products; a cold one costs its embedding, so on a cold store the rerank stage grows
# with the pool.
POOL_DEFAULT = 64
POOL_MAX = 200  # the graph's limit
BM25_DEPTH_MAX = 1_000  # the lexicon's limit
MAX_QUERY_CHARS = 16_384  # the lexicon's limit; the embedder truncates (and says so)
SCORE_DIGITS = 6

# Comparison-shaped questions: evidence for each named entity, not the same one twice.
COMPARISON_PATTERN = re.compile(
    r"\bor\b|\bboth\b|\bcompare\b|\bcomparison\b|\bwhich (?:one|of)\b|\bthe same\b"
    r"|둘 다|비교|어느 쪽|どちら|比較",
    re.IGNORECASE,
)


@dataclass
class Timing:
    started: float = field(default_factory=time.perf_counter)
    stages_ms: dict[str, float] = field(default_factory=dict)
    _mark: float = field(default_factory=time.perf_counter)

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.stages_ms[stage] = round((now - self._mark) * 1000, 3)
        self._mark = now

    def report(self) -> dict[str, float]:
        return {**self.stages_ms, "total": round((time.perf_counter() - self.started) * 1000, 3)}


FUSIONS = ("blend", "graph_then_rerank", "lists")
HOP_GATES = ("none", "relevance")
WEIGHT_MAX = 10.0
SEEDS_MAX = 100


@dataclass(frozen=True)
class Tuning:
    """How the evidence lists combine; the defaults are what the recall-quality ablation kept
    (docs/BENCHMARKS.md, "Recall quality (issue 8)"), the rest stay for re-measuring.

    * ``fusion`` — ``blend`` (kept): the sum of each evidence's score min–max normalised over
      the pool — key path, BM25, reranker (dense) and hops (``fuse_blend``);
      ``graph_then_rerank`` (before issue 8): RRF of the graph's rank (itself key path ⊕ BM25
      plus raw hop scores) and the reranker's rank; ``lists``: one RRF over every evidence
      list, each a rank.
    * ``hop_gate`` — ``relevance`` scales a hop's entry by the reached memory's reranker
      relevance (min–max over the pool); ``none`` (kept since named hops: the bridge passage
      of a two-hop question rarely looks like the question to the reranker).
    * ``hop_weight``, ``dense_weight``, ``key_weight`` — the weight of those evidences.
    * ``seeds`` — how many of the graph's best memories start the hop walk; a memory that is
      itself a seed is never reached by a hop, so fewer seeds let the best evidence lend its
      neighbours (the bridge of a two-hop question) a hop score even when they matched too.
    * ``key_agg`` — a memory under several matched keys: ``sum`` or ``max`` of their evidence.
    * ``evidence`` — comparison questions put one candidate per named entity first.
    * ``fallback`` — when no key, BM25 term or hop found anything, the graph hands over the
      members of the query's nearest keys below the threshold for the reranker to judge.
    * ``bm25_depth`` — how many BM25 hits the lexicon hands the graph.
    * ``phrase_keys`` — per phrase of the query, how many nearest concept keys it matches (0:
      none); ``phrase_floor`` their cosine floor (0: the graph's, key recall + a margin);
      ``phrase_links`` — ``auto``: a phrase's key leads only through auto-keys' links.
    * ``link_weighted`` — key and hop evidence count at their links' share of an agent's link.
    * ``auto_hops`` — whether a step between two auto-keys' links is a hop.
    * ``named_hops`` — the hop seed also steps through the keys its text names.
    """

    fusion: str = "blend"
    hop_gate: str = "none"
    hop_weight: float = 1.0
    dense_weight: float = 1.0
    key_weight: float = 1.0
    seeds: int = SEEDS_DEFAULT
    key_agg: str = "sum"
    evidence: bool = True
    fallback: bool = True
    bm25_depth: int = BM25_DEPTH
    phrase_keys: int = PHRASE_KEYS_DEFAULT
    phrase_floor: float = 0.0  # 0: the graph's default (key-recall threshold + a margin)
    phrase_links: str = "auto"
    link_weighted: bool = True
    auto_hops: bool = False
    named_hops: bool = True

    @classmethod
    def parse(cls, raw: Any) -> Tuning:
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise BadRequest("tuning must be a map")
        only_fields(raw, tuple(cls.__dataclass_fields__), "tuning")
        base = cls()
        return cls(
            fusion=opt_choice(raw, "fusion", base.fusion, FUSIONS),
            hop_gate=opt_choice(raw, "hop_gate", base.hop_gate, HOP_GATES),
            hop_weight=opt_number(raw, "hop_weight", base.hop_weight, 0.0, WEIGHT_MAX),
            dense_weight=opt_number(raw, "dense_weight", base.dense_weight, 0.0, WEIGHT_MAX),
            key_weight=opt_number(raw, "key_weight", base.key_weight, 0.0, WEIGHT_MAX),
            seeds=opt_int(raw, "seeds", base.seeds, 1, SEEDS_MAX),
            key_agg=opt_choice(raw, "key_agg", base.key_agg, KEY_AGGREGATES),
            evidence=opt_bool(raw, "evidence", base.evidence),
            fallback=opt_bool(raw, "fallback", base.fallback),
            bm25_depth=opt_int(raw, "bm25_depth", base.bm25_depth, 1, BM25_DEPTH_MAX),
            phrase_keys=opt_int(raw, "phrase_keys", base.phrase_keys, 0, PHRASE_KEYS_MAX),
            phrase_floor=opt_number(raw, "phrase_floor", base.phrase_floor, 0.0, WEIGHT_MAX),
            phrase_links=opt_choice(raw, "phrase_links", base.phrase_links, PHRASE_LINKS),
            link_weighted=opt_bool(raw, "link_weighted", base.link_weighted),
            auto_hops=opt_bool(raw, "auto_hops", base.auto_hops),
            named_hops=opt_bool(raw, "named_hops", base.named_hops),
        )


@dataclass(frozen=True)
class SearchRequest:
    query: str
    namespace: str
    top_k: int
    hops: int
    pool: int
    rerank: bool
    timing: bool
    min_seq: int | None
    tuning: Tuning = field(default_factory=Tuning)

    @classmethod
    def parse(cls, body: Any, *, top_k_default: int = TOP_K_DEFAULT) -> SearchRequest:
        body = body_of(body)
        query = req_str(body, "query", MAX_QUERY_CHARS)
        namespace = opt_str(body, "namespace", MAX_NAMESPACE_CHARS)
        return cls(
            query=query,
            namespace=normalize_namespace(namespace),
            top_k=opt_int(body, "top_k", top_k_default, 1, TOP_K_MAX),
            hops=opt_int(body, "hops", 2, 0, 5),
            pool=opt_int(body, "pool", POOL_DEFAULT, 1, POOL_MAX),
            rerank=opt_bool(body, "rerank", True),
            timing=opt_bool(body, "timing", False),
            min_seq=opt_int(body, "min_seq", 0, 0, 2**62) or None,
            tuning=Tuning.parse(body.get("tuning")),
        )


def rerank_segments(query: str) -> list[str]:
    """What the reranker compares passages with: the query, or sentences of a long one.

    A long prompt is mostly pasted material with the question somewhere, usually at an end;
    scored whole, the question drowns (a 4,000-character log scores ~0 against the memory it
    asks about). So a long query is cut into distinct sentences and the first and last few are
    scored separately; a passage keeps its best score.
    """
    if len(query) <= RERANK_SEGMENT_CHARS:
        return [query]
    sentences = list(
        dict.fromkeys(
            part.strip()[:RERANK_SEGMENT_CHARS]
            for part in SENTENCE_END.split(query)
            if len(part.strip()) >= MIN_SEGMENT_CHARS
        )
    )
    if len(sentences) <= HEAD_SEGMENTS + TAIL_SEGMENTS:
        return sentences or [query[:RERANK_SEGMENT_CHARS]]
    return sentences[:HEAD_SEGMENTS] + sentences[-TAIL_SEGMENTS:]


def is_comparison(query: str) -> bool:
    return COMPARISON_PATTERN.search(query) is not None


class Search:
    def __init__(self, client: Client, profile: EmbedderProfile) -> None:
        self.client = client
        self.profile = profile

    def search(self, body: Any) -> dict[str, Any]:
        request = SearchRequest.parse(body)
        timing = Timing()
        degraded: dict[str, str] = {}
        vector, thresholds, bm25, phrases = self._analyse(request, degraded)
        timing.lap("analyse")
        graph_body: dict[str, Any] = {
            "namespace": request.namespace,
            "text": request.query,
            "bm25": bm25,
            "hops": request.hops,
            "pool": request.pool,
        }
        if vector is not None:
            graph_body["vector"] = vector
        if thresholds is not None:
            graph_body["thresholds"] = thresholds
        if phrases is not None:
            graph_body["phrase_vectors"] = phrases
            graph_body["phrase_keys"] = request.tuning.phrase_keys
            graph_body["phrase_links"] = request.tuning.phrase_links
            if request.tuning.phrase_floor:
                graph_body["phrase_min_cosine"] = request.tuning.phrase_floor
        graph_body["key_agg"] = request.tuning.key_agg
        graph_body["seeds"] = request.tuning.seeds
        graph_body["fallback"] = request.tuning.fallback
        graph_body["auto_hops"] = request.tuning.auto_hops
        graph_body["named_hops"] = request.tuning.named_hops
        found = self.client.call(
            "graph", "recall_candidates", graph_body, timeout_ms=remaining_ms(DEFAULT_BUDGET_MS)
        )
        timing.lap("graph")
        candidates: list[dict[str, Any]] = found["candidates"]
        relevance = None
        if request.rerank and candidates:
            relevance = self._relevance(request.query, candidates, degraded)
        elif not request.rerank:
            degraded["reranker"] = "disabled for this request"
        if request.tuning.fusion == "blend":
            candidates = fuse_blend(candidates, relevance, request.tuning)
        elif request.tuning.fusion == "lists":
            candidates = fuse_lists(candidates, relevance, request.tuning)
        elif relevance is not None:
            candidates = fuse_graph_then_rerank(candidates, relevance)
        timing.lap("rerank")
        if request.tuning.evidence and is_comparison(request.query):
            candidates = select_evidence(candidates, found["keys"], request.top_k)
        memories = candidates[: request.top_k]
        reply: dict[str, Any] = {
            "status": "found" if memories else "no_match",
            "query": request.query,
            "namespace": found["namespace"],
            "memories": memories,
            "keys": [key_summary(k) for k in found["keys"]],
            "anchor": found["anchor"],
            "degraded": degraded,
        }
        if request.timing:
            reply["timing_ms"] = timing.report()
        return reply

    def _analyse(
        self, request: SearchRequest, degraded: dict[str, str]
    ) -> tuple[Any, dict[str, Any] | None, list[dict[str, Any]], Any]:
        """The query vector with its model's thresholds, the BM25 hits and the vectors of the
        query's own phrases (``Tuning.phrase_keys``); any may be missing.

        Vector and BM25 are fetched in parallel with the lexicon's phrases of the query; the
        phrases are embedded after (as keys: the embedder's cache serves repeated words).
        """
        lexicon_body: dict[str, Any] = {
            "query": request.query,
            "namespace": request.namespace,
            "top_n": request.tuning.bm25_depth,
        }
        if request.min_seq is not None:
            lexicon_body["min_seq"] = request.min_seq
        budget = int(remaining_ms(DEFAULT_BUDGET_MS) * ANALYSE_SHARE)
        calls: list[tuple[str, str, Any]] = [
            ("embedder", "embed", {"texts": [request.query], "kind": "query"}),
            ("lexicon", "search", lexicon_body),
        ]
        if request.tuning.phrase_keys:
            phrase_body = {"text": request.query, "limit": PHRASES_MAX, "content_words": True}
            calls.append(("lexicon", "extract_keys", phrase_body))
        started = time.perf_counter()
        embedded, lexical, *extracted = self.client.call_many(calls, timeout_ms=budget)
        vector, thresholds = None, None
        if isinstance(embedded, KeymemError):
            degraded["embedder"] = str(embedded)
        else:
            vector = embedded["vectors"][0]
            thresholds = self.profile.thresholds(embedded["fingerprint"])
        bm25: list[dict[str, Any]] = []
        if isinstance(lexical, KeymemError):
            degraded["lexicon"] = str(lexical)
        else:
            bm25 = lexical["hits"]
        phrases = None
        if vector is not None and extracted and not isinstance(extracted[0], KeymemError):
            texts = [c["key"] for c in extracted[0]["keys"]]
            left = budget - int((time.perf_counter() - started) * 1000)
            if texts and left > 0:
                try:
                    found = self.client.call(
                        "embedder", "embed", {"texts": texts, "kind": "key"}, timeout_ms=left
                    )
                    phrases = found["vectors"]
                except KeymemError as exc:  # the whole query's vector still matches keys
                    degraded["phrases"] = str(exc)
        return vector, thresholds, bm25, phrases

    def _relevance(
        self, query: str, candidates: list[dict[str, Any]], degraded: dict[str, str]
    ) -> Relevance | None:
        """The reranker's score of every candidate against the query, or None if it is down."""
        budget = int(remaining_ms(DEFAULT_BUDGET_MS) * RERANK_SHARE)
        passages = [c["content"] for c in candidates]
        chunks = range(0, len(passages), RERANK_MAX_PASSAGES)
        segments = rerank_segments(query)
        outcomes = self.client.call_many(
            [
                (
                    "reranker",
                    "score",
                    {"query": segment, "passages": passages[at : at + RERANK_MAX_PASSAGES]},
                )
                for segment in segments
                for at in chunks
            ],
            timeout_ms=budget,
        )
        # one row of scores per segment whose every chunk came back, joined in pool order
        per_segment = len(chunks)
        rows, kind = [], ""
        for n in range(len(segments)):
            parts = outcomes[n * per_segment : (n + 1) * per_segment]
            if all(not isinstance(o, KeymemError) for o in parts):
                rows.append([x for o in parts for x in o["scores"]])
                kind = str(parts[0]["score_kind"])
        if not rows:
            degraded["reranker"] = str(next(o for o in outcomes if isinstance(o, KeymemError)))
            return None
        # a passage is as relevant as its best match with any part of the query
        scores = [max(row[i] for row in rows) for i in range(len(candidates))]
        return Relevance(scores, kind)


@dataclass(frozen=True)
class Relevance:
    """The reranker's verdict on a pool, in pool order, and what kind of score it is."""

    scores: list[float]
    kind: str

    def ranks(self) -> list[int]:
        order = sorted(range(len(self.scores)), key=lambda i: -self.scores[i])
        ranks = [0] * len(self.scores)
        for rank, i in enumerate(order, 1):
            ranks[i] = rank
        return ranks

    def labelled(
        self, candidate: dict[str, Any], i: int, score: float, kind: str
    ) -> dict[str, Any]:
        return {
            **candidate,
            "graph_score": candidate["score"],
            "score": round(score, SCORE_DIGITS),
            "score_kind": kind,
            "rerank_score": round(self.scores[i], SCORE_DIGITS),
            "rerank_kind": self.kind,
        }


def fuse_graph_then_rerank(
    candidates: list[dict[str, Any]], relevance: Relevance
) -> list[dict[str, Any]]:
    """RRF of the graph's rank and the reranker's rank (the scores' scales differ, ranks do not)."""
    ranks = relevance.ranks()
    fused = [
        relevance.labelled(
            c, i, 1.0 / (RRF_K + i + 1) + 1.0 / (RRF_K + ranks[i]), "rrf_graph_and_rerank"
        )
        for i, c in enumerate(candidates)
    ]
    # ties (swapped ranks) go to the passage the reranker prefers
    fused.sort(key=lambda c: (-c["score"], -c["rerank_score"]))
    return fused


def _rrf(rank: int | None, weight: float = 1.0) -> float:
    return 0.0 if rank is None else weight / (RRF_K + rank)


def fuse_lists(
    candidates: list[dict[str, Any]], relevance: Relevance | None, tuning: Tuning
) -> list[dict[str, Any]]:
    """One RRF over every evidence list: key path, BM25, the reranker's (dense) and hops.

    Each list contributes through its ranks only, so raw hop scores cannot swamp direct
    evidence; a hop-only memory has at most two entries (hop, dense) against a direct hit's
    three. With ``hop_gate=relevance`` a hop's entry is scaled by how relevant the reranker
    finds the memory it reached (min–max over the pool), so a walk into unrelated territory
    adds nothing. The literal bonus and the depth × freshness factor apply as in the graph.
    """
    hopped = sorted(
        (i for i, c in enumerate(candidates) if c["components"]["hop"]),
        key=lambda i: -candidates[i]["components"]["hop_score"],
    )
    hop_rank = {i: rank for rank, i in enumerate(hopped, 1)}
    dense_rank = relevance.ranks() if relevance is not None else None
    gate = [1.0] * len(candidates)
    if relevance is not None and tuning.hop_gate == "relevance":
        low, high = min(relevance.scores), max(relevance.scores)
        spread = high - low
        gate = [(s - low) / spread if spread > 0 else 1.0 for s in relevance.scores]
    scored = []
    for i, candidate in enumerate(candidates):
        parts = candidate["components"]
        score = _rrf(parts["key_rank"]) + _rrf(parts["bm25_rank"])
        score += LITERAL_BONUS if parts["literal"] else 0.0
        score += _rrf(hop_rank.get(i), tuning.hop_weight * gate[i])
        if dense_rank is not None:
            score += _rrf(dense_rank[i], tuning.dense_weight)
        score *= parts.get("factor", 1.0)
        scored.append((score, i))
    return _ordered(candidates, relevance, scored, "rrf_evidence_lists")


def _ordered(
    candidates: list[dict[str, Any]],
    relevance: Relevance | None,
    scored: list[tuple[float, int]],
    kind: str,
) -> list[dict[str, Any]]:
    """Candidates relabelled with their fused score, best first (ties: the reranker's choice)."""
    if relevance is None:
        plain = [
            {
                **candidates[i],
                "graph_score": candidates[i]["score"],
                "score": round(v, SCORE_DIGITS),
                "score_kind": kind,
            }
            for v, i in scored
        ]
        plain.sort(key=lambda c: -c["score"])
        return plain
    fused = [relevance.labelled(candidates[i], i, v, kind) for v, i in scored]
    fused.sort(key=lambda c: (-c["score"], -c["rerank_score"]))
    return fused


def min_max(values: list[float]) -> list[float]:
    """Values mapped onto [0, 1] by the pool's own range (all 0 when they are all equal)."""
    low, high = min(values, default=0.0), max(values, default=0.0)
    if high <= low:
        return [0.0] * len(values)
    return [(v - low) / (high - low) for v in values]


BLEND_KIND = "blended_evidence"  # normalised key path + BM25 + relevance + gated hops


def fuse_blend(
    candidates: list[dict[str, Any]], relevance: Relevance | None, tuning: Tuning
) -> list[dict[str, Any]]:
    """Score blending: each evidence's score, min–max normalised over the pool, summed.

    Why not RRF: in a small pool RRF mostly counts list *membership* (1/61 vs 1/70 separates
    rank 1 from rank 10, being listed at all is worth 1/61), so a thresholded list — the keys
    above a cosine, BM25's matched terms — decides the order regardless of how strong its
    evidence is, and a weak reranker gets half the say whatever its scores. Normalised scores
    keep the margins: a passage BM25 finds far ahead stays ahead unless the other evidences
    disagree strongly (the convex combination that beat RRF in Bruch et al., "An Analysis of
    Fusion Functions for Hybrid Retrieval", 2023; equal weights, nothing tuned per file).

    The evidences: key path (it already carries literal names: an entity key named in the
    query scores 1), BM25 score, the reranker's relevance (the dense leg with the offline
    default) and hops; a hop may be gated by the reached memory's relevance (``hop_gate``). Depth
    and freshness scale the sum as they scale the graph's own fusion.
    """
    parts = [c["components"] for c in candidates]
    key = min_max([p["key_path"] for p in parts])
    bm25 = min_max([p.get("bm25_score", 0.0) for p in parts])
    hop = min_max([p["hop_score"] for p in parts])
    dense = min_max(relevance.scores) if relevance is not None else [0.0] * len(candidates)
    gate = dense if relevance is not None and tuning.hop_gate == "relevance" else [1.0] * len(hop)
    key_links = [_link_share(p, "key_link", tuning) for p in parts]
    hop_links = [_link_share(p, "hop_link", tuning) for p in parts]
    scored = []
    for i, p in enumerate(parts):
        score = tuning.key_weight * key[i] * key_links[i] + bm25[i]
        score += tuning.dense_weight * dense[i]
        score += tuning.hop_weight * hop[i] * gate[i] * hop_links[i]
        scored.append((score * p.get("factor", 1.0), i))
    return _ordered(candidates, relevance, scored, BLEND_KIND)


def _link_share(parts: dict[str, Any], name: str, tuning: Tuning) -> float:
    """How much of a key or hop evidence counts: the share of a default (agent's) link its
    links carry, at most all of it. Min–max normalisation erases the half weight the graph
    gives auto-keys; this puts it back."""
    if not tuning.link_weighted:
        return 1.0
    return min(1.0, float(parts.get(name, 1.0)))


def select_evidence(
    candidates: list[dict[str, Any]], keys: list[dict[str, Any]], top_k: int
) -> list[dict[str, Any]]:
    """Put the best candidate of each literally named entity first, then the rest in order."""
    named = [k["key_id"] for k in keys if k.get("literal")]
    if len(named) < 2:
        return candidates
    chosen: list[dict[str, Any]] = []
    for key_id in named:
        best = next(
            (c for c in candidates if key_id in c["matched_keys"] and c not in chosen), None
        )
        if best is not None:
            chosen.append(best)
    if len(chosen) < 2:
        return candidates
    chosen = chosen[:top_k]
    return chosen + [c for c in candidates if c not in chosen]


def key_summary(key: dict[str, Any]) -> dict[str, Any]:
    return {
        name: key.get(name)
        for name in (
            "key_id",
            "concept",
            "aliases",
            "key_type",
            "score",
            "match_type",
            "memory_count",
            "is_hub",
            "specificity",
        )
    }
