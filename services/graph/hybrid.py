"""Hybrid recall's graph half: key path, fusion with the lexicon's BM25 list, hops.

The router sends the query vector, the query text and the lexicon's ranked BM25 hits; this
module does everything that needs the graph in memory, in one call, and returns the top pool
with every score component labelled — raw scores (key path, BM25 score, hop score, the depth ×
freshness factor) as well as ranks, because the router's final fusion blends the scores
themselves (the router reranks the pool and decides what to show), and each candidate's
``about``, the keys its writer gave it (``agent_keys_text``), for the reranker to read too:

1. key path — the matched keys (cosine, literal, or near one of the query's phrases,
   ``matching.match_keys``) give each of their memories ``key score × IDF × link weight``,
   summed over keys (a phrase's key, by default, only through auto-keys' links);
2. fusion — Reciprocal Rank Fusion (k = 60) of the key-path ranking and the BM25 ranking, plus a
   bonus for memories on a literally named key, times the depth and freshness factors;
3. hops — the best fused memory (``Scoring.seeds``, 1) seeds a bounded breadth-first walk
   over shared keys and related_to links (``matching.expand``); what a hop reaches adds its
   hop score, unless its last step joined two auto-keys' links (no hop, ``auto_hops``);
   ``hop_share`` is that score over the seed's (what the walk passed on: 0.3 × IDF × link
   weight for one step), ``key_link`` / ``hop_link`` the share of an agent's link the
   evidence came through, ``hop_from`` the memory the hop stepped from (the router lifts a
   hop at most to just below it);
4. fallback — when nothing matched at all (no key, no BM25 hit, no memory vector near the
   query's: none made yet), the members of the nearest keys below the threshold, for the
   reranker to judge (``_nearest_key_members``);
5. dense leg — the ``DENSE_DEPTH`` memories nearest the query by their own head's passage
   vector (``memory_vectors``), whatever words or keys they share, appended to the pool for
   the reranker to judge: no fusion vote, so the pool's cut and the hop's seed stay the
   graph's own evidence (``_dense_members``; docs/history/recall-dense-leg-2026-12-02c.md);
   a memory whose vector the memory service has not made yet is not proposed;
6. anchor — whether any signal was strong enough to answer at all (a literal key, a key above
   the recall threshold, or BM25 evidence), so an unrelated query can abstain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from keymem.protocol.errors import BadRequest
from keymem.protocol.fields import body_of, only_fields, opt_int
from keymem.protocol.limits import POOL_DEFAULT, POOL_MAX
from keymem.services.graph import matching
from keymem.services.graph.feedback import RecallBuffer
from keymem.services.graph.links import AUTO, LEARNED
from keymem.services.graph.profile import Thresholds
from keymem.services.graph.requests import namespace_of
from keymem.services.graph.state import LINK_WEIGHT_DEFAULT, GraphState
from keymem.services.graph.text import first_named, query_phrases
from keymem.services.graph.validity import depth_factor, freshness, freshness_factor, validity_view
from keymem.services.graph.views import agent_keys_text, key_idf
from keymem.services.graph.writes import AUTO_LINK_WEIGHT
from keymem.store.records import LinkRecord, MemoryRecord

RRF_K = 60
# A memory under a literally named key counts as if it ranked first in one more list.
LITERAL_BONUS = 1.0 / (RRF_K + 1)
KEYS_DEFAULT = 10
# The hop walk starts from the single best memory: the bridge of a two-hop question hangs off
# the strongest first-hop evidence, and a seed is never reached by a hop, so with 10 seeds a
# 10-memory store had nothing left to reach (docs/history/benchmarks-2026-11-29-to-12-01.md).
SEEDS_DEFAULT = 1
BM25_MAX = 1_000
SCORE_DIGITS = 6
# How a memory under several matched keys combines their evidence: "sum" rewards a memory that
# many of the query's keys point to; "max" counts only its best key.
KEY_AGGREGATES = ("sum", "max")
# Which links a key matched by one of the query's phrases leads through: "auto" only the
# auto-keys' (word-level keys extracted from text, for word-level matches), or "all".
PHRASE_LINKS = ("auto", "all")
PHRASE_KEYS_DEFAULT = 2  # nearest concept keys per query phrase
# The dense leg is a candidate list like the lexicon's, so it is as deep (search.BM25_DEPTH);
# it adds no term to the blend: the reranker's relevance is the same passage vector's cosine.
DENSE_DEPTH = 50
# Key matches the query's text names (its word is the key's concept or alias): lexical
# evidence, unlike a ``semantic`` or per-word ``phrase`` match through a vector.
NAMED_MATCHES = frozenset({"concept", "alias"})
# What a request says; how it is scored is the service's ``Scoring``.
RECALL_FIELDS = (
    "namespace",
    "text",
    "vector",
    "bm25",
    "hops",
    "pool",
    "phrase_vectors",
)


@dataclass(frozen=True)
class Scoring:
    """How the graph turns matched keys, links and hops into candidates. A ``GraphService``
    holds one (the defaults); the recall ablation (``benchmarks/recall_ablation.py``) swaps
    it in process to measure a variant, so none of this travels on the wire.

    * ``seeds`` — how many of the best fused memories start the hop walk; a seed is never
      reached by a hop, so one seed lets the best evidence lend its neighbours (the bridge of a
      two-hop question) a hop score even when they matched too.
    * ``key_agg`` — a memory under several matched keys: the ``sum`` or the ``max`` of their
      evidence.
    * ``phrase_keys`` — per phrase of the query, how many nearest concept keys it matches;
      ``phrase_links`` — ``auto``: a phrase's key leads only through auto-keys' links.
    * ``auto_hops`` — whether a step between two auto-keys' links is a hop.
    * ``named_hops`` — the seed also steps through the keys its text names.
    * ``fallback`` — when nothing matched, the members of the nearest keys below the threshold.
    * ``dense_leg`` — how many memories nearest the query's vector by their own text vectors
      (``memory_vectors``) are proposed (0: none); ``dense_pooled`` — those the fused pool
      left out are handed to the reranker too; ``dense_fused`` — the leg's list counts in
      the fusion as one more ranked list (the pool's cut, the hop's seed: it cost bridge
      questions, so the product appends without a vote).
    """

    seeds: int = SEEDS_DEFAULT
    key_agg: str = "sum"
    phrase_keys: int = PHRASE_KEYS_DEFAULT
    phrase_links: str = "auto"
    auto_hops: bool = False
    named_hops: bool = True
    fallback: bool = True
    dense_leg: int = DENSE_DEPTH
    dense_pooled: bool = True
    dense_fused: bool = False


def _bm25_of(body: dict[str, Any]) -> list[tuple[str, float]]:
    raw = body.get("bm25", [])
    if not isinstance(raw, list) or len(raw) > BM25_MAX:
        raise BadRequest(f"bm25 must be a list of at most {BM25_MAX} hits")
    hits = []
    for hit in raw:
        if not isinstance(hit, dict) or not isinstance(hit.get("id"), str):
            raise BadRequest('each bm25 hit must be {"id": str, "score": number}')
        score = hit.get("score", 0.0)
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise BadRequest("bm25 scores must be numbers")
        hits.append((hit["id"], float(score)))
    return hits


def recall_candidates(
    state: GraphState,
    buffer: RecallBuffer,
    thresholds: Thresholds,
    raw: Any,
    now: float,
    scoring: Scoring = Scoring(),
) -> dict[str, Any]:
    body = body_of(raw)
    only_fields(body, RECALL_FIELDS, "recall_candidates")
    namespace = namespace_of(body)
    pool = opt_int(body, "pool", POOL_DEFAULT, 1, POOL_MAX)
    hops = opt_int(body, "hops", 2, 0, matching.HOPS_MAX)
    per_key = matching.EXPAND_PER_KEY_DEFAULT
    bm25 = _bm25_of(body)
    key_agg = scoring.key_agg
    phrases = body.get("phrase_vectors")
    phrase_keys = scoring.phrase_keys
    auto_hops = scoring.auto_hops
    named_hops = scoring.named_hops
    phrase_links = scoring.phrase_links
    # every phrase may bring its own keys on top of the whole query's
    extra = phrases.shape[0] * phrase_keys if isinstance(phrases, np.ndarray) else 0
    match_body = {
        "namespace": namespace,
        "vector": body.get("vector"),
        "text": body.get("text"),
        "top_k": min(
            KEYS_DEFAULT + extra,
            matching.MATCH_MAX_TOP_K,
        ),
        "learn": False,
        "phrase_vectors": phrases if phrase_keys else None,
        "phrase_keys": phrase_keys or 1,
    }
    keys = matching.match_keys(state, buffer, thresholds, match_body, now)["keys"]

    # 1. key path
    key_path: dict[str, float] = {}
    # per memory, its strongest matched link as a share of a default (agent's) link
    key_link: dict[str, float] = {}
    via_keys: dict[str, list[str]] = {}
    literal: set[str] = set()
    for key in keys:
        strongest = state.strongest_columns(key["key_id"], per_key)
        word_level = key["match_type"] == "phrase" and phrase_links == "auto"
        for memory_id, weight, flags in zip(
            strongest.memory_ids, strongest.weights.tolist(), strongest.flags.tolist(), strict=True
        ):
            memory = state.memories.get(memory_id)
            if memory is None or not memory.active(now) or (word_level and not flags & AUTO):
                continue
            evidence = key["score"] * key["idf"] * weight
            before = key_path.get(memory_id, 0.0)
            key_path[memory_id] = before + evidence if key_agg == "sum" else max(before, evidence)
            share = weight / LINK_WEIGHT_DEFAULT
            key_link[memory_id] = max(key_link.get(memory_id, 0.0), share)
            via_keys.setdefault(memory_id, []).append(key["key_id"])
            if key["literal"]:
                literal.add(memory_id)

    # 2. fusion
    active_bm25 = [
        (memory_id, score)
        for memory_id, score in bm25
        if (m := state.memories.get(memory_id)) is not None
        and m.namespace == namespace
        and m.active(now)
    ]
    key_rank = {m: r for r, m in enumerate(sorted(key_path, key=lambda m: -key_path[m]), 1)}
    bm25_rank = {memory_id: rank for rank, (memory_id, _) in enumerate(active_bm25, 1)}
    bm25_score = dict(active_bm25)
    dense = _dense_members(state, namespace, body, scoring.dense_leg, now)
    dense_rank = {memory_id: rank for rank, memory_id in enumerate(dense, 1)}
    lists = (key_rank, bm25_rank, dense_rank) if scoring.dense_fused else (key_rank, bm25_rank)
    fused: dict[str, float] = {}
    factors: dict[str, float] = {}
    for memory_id in set().union(*lists):
        score = sum(1.0 / (RRF_K + ranks[memory_id]) for ranks in lists if memory_id in ranks)
        if memory_id in literal:
            score += LITERAL_BONUS
        memory = state.memories[memory_id]
        factors[memory_id] = _factor(memory, now)
        fused[memory_id] = score * factors[memory_id]

    # 3. hops from the best fused memories
    hop_score: dict[str, dict[str, Any]] = {}
    hop_link: dict[str, float] = {}  # the share of default links the hop's last step crossed
    seed_score = 0.0  # the walk's strongest start: hop_share is a hop's score over it
    if hops and fused:
        seeds = dict(sorted(fused.items(), key=lambda item: -item[1])[: scoring.seeds])
        expanded = matching.expand(
            state,
            {
                "namespace": namespace,
                "seeds": seeds,
                "hops": hops,
                "per_key": per_key,
                "related": True,
            },
            now,
        )
        seed_score = max(seeds.values())
        rows = [(row, _via_weight(state, row, auto_hops)) for row in expanded["memories"]]
        if named_hops:
            rows += _named_steps(state, namespace, seeds, per_key, auto_hops, now)
        for row, share in rows:
            # an auto-auto step is no hop: it takes no pool place either
            if share > 0 and row["score"] > hop_score.get(row["memory_id"], {}).get("score", 0):
                hop_score[row["memory_id"]] = row
                hop_link[row["memory_id"]] = share

    total = dict(fused)
    for memory_id, row in hop_score.items():
        total[memory_id] = total.get(memory_id, 0.0) + row["score"]
    # RRF ties whenever two lists swap ranks; the graph's own evidence breaks them.
    ranked = sorted(total, key=lambda m: (-total[m], -key_path.get(m, 0.0), m))[:pool]
    if scoring.dense_pooled:
        pooled = set(ranked)
        ranked += [memory_id for memory_id in dense_rank if memory_id not in pooled]
    near: dict[str, float] = {}
    if not ranked and scoring.fallback:
        near = _nearest_key_members(state, buffer, thresholds, match_body, pool, now)
        ranked = list(near)

    candidates = []
    for memory_id in ranked:
        memory = state.memories[memory_id]
        hop = hop_score.get(memory_id)
        links = state.links.key_flags(memory_id)
        candidates.append(
            {
                "memory_id": memory_id,
                "content": memory.content,
                "namespace": memory.namespace,
                "created_at": memory.created_at,
                "depth": round(memory.depth, 3),
                "validity": validity_view(memory, now),
                "score": round(total.get(memory_id, 0.0), SCORE_DIGITS),
                "score_kind": "rrf_fused_rank",
                "components": {
                    "fused": round(fused.get(memory_id, 0.0), SCORE_DIGITS),
                    "key_path": round(key_path.get(memory_id, 0.0), SCORE_DIGITS),
                    "key_rank": key_rank.get(memory_id),
                    "bm25_rank": bm25_rank.get(memory_id),
                    "bm25_score": round(bm25_score.get(memory_id, 0.0), SCORE_DIGITS),
                    "dense_rank": dense_rank.get(memory_id),
                    "literal": memory_id in literal,
                    "hop": hop["hop"] if hop else 0,
                    "hop_score": round(hop["score"], SCORE_DIGITS) if hop else 0.0,
                    "hop_share": round(hop["score"] / seed_score, SCORE_DIGITS) if hop else 0.0,
                    "via": hop["via"] if hop else None,
                    "hop_from": hop["from"] if hop else None,
                    "key_link": round(key_link.get(memory_id, 0.0), SCORE_DIGITS),
                    "hop_link": round(hop_link.get(memory_id, 0.0), SCORE_DIGITS),
                    "factor": round(
                        factors[memory_id] if memory_id in factors else _factor(memory, now),
                        SCORE_DIGITS,
                    ),
                    "near_key": near.get(memory_id),
                },
                "matched_keys": via_keys.get(memory_id, []),
                "about": agent_keys_text(state, links),
                "subject": subject_of(state, memory_id, links),
            }
        )
    anchor = {
        "literal_key": any(k["literal"] for k in keys),
        "best_key_score": max((k["score"] for k in keys), default=0.0),
        "bm25_hits": len(active_bm25),
        "anchored": bool(keys) or bool(active_bm25),
    }
    return {"namespace": namespace, "keys": keys, "candidates": candidates, "anchor": anchor}


def _dense_members(
    state: GraphState, namespace: str, body: dict[str, Any], most: int, now: float
) -> list[str]:
    """The ``most`` active memories of ``namespace`` whose text vectors lie nearest the
    query's, best first: the candidates no key and no shared word reach
    (a question in another script, a paraphrase, the items of a list a question asks for)."""
    if not most:
        return []
    query = matching.query_vector(state, body)
    if query is None:
        return []

    def active(memory_id: str) -> bool:
        memory = state.memories.get(memory_id)
        return memory is not None and memory.active(now)

    return state.memory_vectors.nearest(namespace, query, most, active)


def subject_of(state: GraphState, memory_id: str, links: list[tuple[str, int]]) -> str | None:
    """The person the memory is about: of the ``name`` keys its writer filed it under (of
    ``links``, its ``LinkTable.key_flags``), the one its text names first (None when it names
    none). "Caroline appreciates Melanie's love for
    her family" is filed under both and is Caroline's; the router gives a memory about another
    person than the question names no key or hop evidence (``Fusion.subjects``)."""
    people = (
        (key_id, key.surfaces())
        for key_id, flags in links
        if (key := state.keys.get(key_id)) is not None
        and key.key_type == "name"
        and not flags & LEARNED
    )
    return first_named(state.memories[memory_id].content, people)


def _nearest_key_members(
    state: GraphState,
    buffer: RecallBuffer,
    thresholds: Thresholds,
    match_body: dict[str, Any],
    pool: int,
    now: float,
) -> dict[str, float]:
    """Fallback when nothing matched (no key above the threshold, no BM25 term, so no hop,
    and no memory vector near the query's: none made yet, the embedder down): the members of
    the query's nearest keys, below the threshold, by key cosine.

    A query that shares no word and no key with the store — another language, a paraphrase —
    would otherwise get nothing at all although the answer is there (koblex_crosslingual
    without memory vectors: recall@10 0.004 against dense's 0.553). These candidates carry no
    graph evidence (``key_rank`` None, ``near_key`` = the key's cosine) and the anchor still
    says unanchored, so inject, which wants a graph connection, never surfaces them.
    """
    body = {
        **match_body,
        "min_cosine": -1.0,
        "top_k": matching.MATCH_MAX_TOP_K,
        "learn": False,
        "phrase_vectors": None,
    }
    members: dict[str, float] = {}
    for key in matching.match_keys(state, buffer, thresholds, body, now)["keys"]:
        for link in state.ranked(key["key_id"]):
            memory = state.memories.get(link.memory_id)
            if memory is not None and memory.active(now) and link.memory_id not in members:
                members[link.memory_id] = float(key["cosine"] or 0.0)
            if len(members) >= pool:
                return members
    return members


def _named_steps(
    state: GraphState,
    namespace: str,
    seeds: dict[str, float],
    per_key: int,
    auto_hops: bool,
    now: float,
) -> list[tuple[dict[str, Any], float]]:
    """One hop from each seed through the keys its text names but it is not linked to.

    Auto-keys link a memory only to keys that existed when it was written, so a passage
    naming an entity whose own memory came later never reaches it; reading the seed's text
    for the namespace's key surfaces at query time closes that gap whatever the write order.
    The named side counts as an auto link (half a default link).
    """
    index = state.indexes.get(namespace)
    if index is None:
        return []
    steps: list[tuple[dict[str, Any], float]] = []
    for seed, base in seeds.items():
        memory = state.memories.get(seed)
        if memory is None:
            continue
        own = state.mem_links[seed]
        named = {k for p in query_phrases(memory.content) for k in index.literal.get(p, ())}
        for key_id in named - own.keys():
            idf = key_idf(state.keys[key_id], state.active_count.get(key_id, 0))
            for link in state.strongest(key_id, per_key):
                other = state.memories.get(link.memory_id)
                if other is None or link.memory_id in seeds or not other.active(now):
                    continue
                if _extracted(link) and not auto_hops:
                    continue
                fresh = freshness_factor(freshness(other, now))
                score = base * matching.HOP_DECAY * idf * link.weight * fresh
                row = {
                    "memory_id": link.memory_id,
                    "score": round(score, 6),
                    "hop": 1,
                    "via": key_id,
                    "named": True,
                    "from": seed,
                }
                share = AUTO_LINK_WEIGHT * link.weight / LINK_WEIGHT_DEFAULT**2
                steps.append((row, share))
    return steps


def _extracted(link: LinkRecord) -> bool:
    """An auto-key's link from text extraction; a learned link (a read taught it) is an
    association even though it is marked auto."""
    return link.auto and not link.learned


def _via_weight(state: GraphState, hop: dict[str, Any], auto_hops: bool) -> float:
    """The last step of a hop as a share of two default links: the weight of the link that
    left the memory it came from times the one that reached it, over the default's square
    (a related_to edge counts as default links). Unless ``auto_hops``, a step between two
    extracted auto-keys' links counts nothing: two texts sharing an extracted word is
    co-occurrence, not an association an agent made or a read taught (on auto-keyed stores
    those hops cost recall: docs/history/benchmarks-2026-11-29-to-12-01.md)."""
    if hop["via"] == "related_to":
        return 1.0
    left = state.link(hop["via"], hop["from"])
    reached = state.link(hop["via"], hop["memory_id"])
    if left is None or reached is None:
        return 0.0
    if _extracted(left) and _extracted(reached) and not auto_hops:
        return 0.0
    return left.weight * reached.weight / LINK_WEIGHT_DEFAULT**2


def _factor(memory: MemoryRecord, now: float) -> float:
    """Depth × freshness: how much a memory's own standing scales its evidence."""
    return depth_factor(memory.depth) * freshness_factor(freshness(memory, now))
