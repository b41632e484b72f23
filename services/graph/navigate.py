"""The graph's half of the MCP ``recall`` tool in one call: key clusters and a preview pool.

The agent's ``recall`` is key navigation: the keys its query names or lands near, the keys of
the memories whose text holds the query (the router has already gated those by the lexicon's
coverage), and one passive preview under the strongest key. Everything here is the graph's own
state, so one request answers it — the key match, the content keys, the strongest key's members
with their content and their keys' cosines to the query (for the router's reranker and gates),
the nearest keys on a miss and, when asked, the per-namespace counts.

A cluster is a set of memories, not a key: keys that lead to exactly the same active memories
(the five keys of one memory a content query reached) are one cluster, the best-ranked key
carrying the others in ``merged_keys``, so ``top_k`` counts distinct places to look.
"""

from __future__ import annotations

import heapq
from collections import Counter
from typing import Any

from keymem.protocol.errors import BadRequest
from keymem.protocol.fields import body_of, opt_bool, opt_int
from keymem.services.graph import matching, views
from keymem.services.graph.feedback import RecallBuffer
from keymem.services.graph.profile import Thresholds
from keymem.services.graph.requests import namespace_of
from keymem.services.graph.state import GraphState
from keymem.services.graph.validity import depth_factor, freshness, freshness_factor

TOP_K_MAX = 20
POOL_DEFAULT = 30  # the strongest key's members the router's reranker judges for the preview
POOL_MAX = 64
NEAREST_KEYS = 3
CONTENT_MAX = 50
SCORE_DIGITS = 4


def _content_hits(body: dict[str, Any]) -> list[tuple[str, float]]:
    """``content``: [{id, score}] of memories whose text holds the query, best first."""
    raw = body.get("content", [])
    if not isinstance(raw, list) or len(raw) > CONTENT_MAX:
        raise BadRequest(f"content must be a list of at most {CONTENT_MAX} {{id, score}} maps")
    hits = []
    for hit in raw:
        if (
            not isinstance(hit, dict)
            or not isinstance(hit.get("id"), str)
            or isinstance(hit.get("score"), bool)
            or not isinstance(hit.get("score"), int | float)
        ):
            raise BadRequest("each content hit must be a map with a string id and a score")
        hits.append((hit["id"], float(hit["score"])))
    return hits


def _content_keys(
    state: GraphState, namespace: str, hits: list[tuple[str, float]], seen: set[str]
) -> list[dict[str, Any]]:
    """The keys of the hit memories not matched already, scored by their memory's hit."""
    extra = []
    for memory_id, score in hits:
        memory = state.memories.get(memory_id)
        if memory is None or memory.namespace != namespace:
            continue
        for key_id in state.mem_links[memory_id]:
            if key_id in seen or state.active_count.get(key_id, 0) <= 0:
                continue
            seen.add(key_id)
            view = views.key_view(state, state.keys[key_id])
            view.update(score=round(score, SCORE_DIGITS), match_type="content", literal=False)
            extra.append(view)
    return extra


def _members(
    state: GraphState, key_id: str, body: dict[str, Any], pool: int, now: float
) -> list[dict[str, Any]]:
    """The key's ``pool`` strongest active members (link weight × depth × freshness), each
    with its content, validity and keys — the keys with their cosine to the query vector."""
    namespace = state.keys[key_id].namespace
    ranked = []
    for memory_id, link in state.key_links[key_id].items():
        memory = state.memories[memory_id]
        if memory.active(now):
            rank = link.weight * depth_factor(memory.depth)
            rank *= freshness_factor(freshness(memory, now))
            ranked.append((rank, memory.created_at, memory_id, link.weight))
    best = heapq.nlargest(pool, ranked)
    linked = matching.memory_keys(
        state,
        {**_vector_only(body), "namespace": namespace, "memory_ids": [m for _, _, m, _ in best]},
        now,
    )["memories"]
    members = []
    for rank, _created, memory_id, weight in best:
        view = views.memory_view(state, state.memories[memory_id], now)
        members.append(
            {
                "id": memory_id,
                "content": view["content"],
                "namespace": view["namespace"],
                "depth": view["depth"],
                "created_at": view["created_at"],
                "validity": view["validity"],
                "link_weight": round(weight, SCORE_DIGITS),
                "link_rank": round(rank, SCORE_DIGITS + 3),
                "keys": linked.get(memory_id, []),
                "about": view["about"],
            }
        )
    return members


def _clusters(state: GraphState, keys: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """``keys`` (best first) with each key whose active memories are those of a better one
    folded into it as a ``merged_keys`` entry. Only keys of equal counts are compared."""
    counts = Counter(state.active_count.get(k["key_id"], 0) for k in keys)
    clusters: list[dict[str, Any]] = []
    by_members: dict[frozenset[str], dict[str, Any]] = {}
    for key in keys:
        key["merged_keys"] = []
        count = state.active_count.get(key["key_id"], 0)
        if count <= 0 or counts[count] == 1:
            clusters.append(key)
            continue
        members = frozenset(
            memory_id
            for memory_id in state.key_links[key["key_id"]]
            if state.memories[memory_id].active(now)
        )
        first = by_members.setdefault(members, key) if members else key
        if first is key:
            clusters.append(key)
        else:
            first["merged_keys"].append({"key_id": key["key_id"], "concept": key["concept"]})
    return clusters


def _vector_only(body: dict[str, Any]) -> dict[str, Any]:
    return {"vector": body["vector"]} if body.get("vector") is not None else {}


def navigate(
    state: GraphState, buffer: RecallBuffer, thresholds: Thresholds, raw: Any, now: float
) -> dict[str, Any]:
    """Key clusters for ``text`` (and ``vector``), content keys, the preview pool."""
    body = body_of(raw)
    namespace = namespace_of(body)
    top_k = opt_int(body, "top_k", 8, 1, TOP_K_MAX)
    pool = opt_int(body, "pool", POOL_DEFAULT, 1, POOL_MAX)
    explain = opt_bool(body, "explain", False)
    hits = _content_hits(body)
    matched = matching.match_keys(state, buffer, thresholds, {**body, "top_k": top_k}, now)["keys"]
    seen = {k["key_id"] for k in matched}
    keys = _clusters(state, matched + _content_keys(state, namespace, hits, seen), now)[:top_k]
    reply: dict[str, Any] = {"namespace": namespace, "keys": keys, "members": []}
    if keys:
        reply["members"] = _members(state, keys[0]["key_id"], body, pool, now)
    elif body.get("vector") is not None:
        nearest = {
            **_vector_only(body),
            "namespace": namespace,
            "top_k": NEAREST_KEYS,
            "min_cosine": -1.0,
            "learn": False,
        }
        reply["nearest_keys"] = matching.match_keys(state, buffer, thresholds, nearest, now)["keys"]
    if explain:
        reply["counts"] = views.counts(state, {}, now)["namespaces"]
    return reply
