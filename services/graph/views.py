"""Read-only views: key and memory payloads, read_key, browse_keys, history, counts, lists.

Nothing here changes state. Counts are of ACTIVE memories (not superseded, not expired), which
is what hub status, specificity and IDF describe.
"""

from __future__ import annotations

import heapq
import time
from typing import Any

from keymem.protocol.errors import BadRequest, NotFound
from keymem.protocol.fields import body_of, opt_bool, opt_int
from keymem.protocol.limits import CONTENT_MAX_CHARS
from keymem.services.graph.links import AUTO, LEARNED
from keymem.services.graph.requests import id_list, namespace_filter, namespace_of, req_str
from keymem.services.graph.state import GraphState
from keymem.services.graph.validity import (
    depth_factor,
    freshness,
    freshness_factor,
    status_of,
    validity_view,
)
from keymem.store.records import KeyRecord, MemoryRecord, from_json

SCORE_DIGITS = 3
READ_KEY_MAX_LIMIT = 50
BROWSE_MAX_LIMIT = 100
ENTITY_IDF_FACTOR = 0.5


def key_idf(key: KeyRecord, count: int) -> float:
    if count <= 1:
        return 1.0
    idf = 1.0 / count
    return idf * ENTITY_IDF_FACTOR if key.is_entity else idf


def key_view(state: GraphState, key: KeyRecord) -> dict[str, Any]:
    count = max(0, state.active_count.get(key.id, 0))
    return {
        "key_id": key.id,
        "concept": key.concept,
        "aliases": [a.alias for a in key.aliases],
        "learned_aliases": [a.alias for a in key.aliases if a.learned],
        "key_type": key.key_type,
        "namespace": key.namespace,
        "memory_count": count,
        "is_hub": count >= state.hub_min_links,
        "specificity": round(1.0 / count, SCORE_DIGITS) if count else 0.0,
        "idf": round(key_idf(key, count), 6),
    }


ABOUT_SEPARATOR = "; "


def agent_keys_text(state: GraphState, links: list[tuple[str, int]]) -> str | None:
    """The keys its writer gave a memory (``links``: its ``LinkTable.key_flags``), joined
    (``about``; None when it has none): the router's reranker judges them as a second reading
    of the memory. A title or an agent's keys say what a memory is about in a few words, where
    a passage's cosine is diluted by everything else it says. Auto-keys and learned links are
    left out: auto-keys are words of the text itself (no second reading), a learned link is a
    guess from traffic. In its writer's order (the most telling key first, as the skill asks),
    which the graph's load keeps: the alphabetical order read locomo_agentkeys 0.005 worse
    (recall@5)."""
    concepts = [
        state.keys[key_id].concept for key_id, flags in links if not flags & (AUTO | LEARNED)
    ]
    return ABOUT_SEPARATOR.join(concepts) or None


def memory_view(state: GraphState, memory: MemoryRecord, now: float) -> dict[str, Any]:
    keys = []
    for key_id, link in state.mem_links[memory.id].items():
        view = key_view(state, state.keys[key_id])
        view["link_weight"] = round(link.weight, SCORE_DIGITS)
        view["auto"] = link.auto
        keys.append(view)
    keys.sort(key=lambda k: -k["link_weight"])
    return {
        "id": memory.id,
        "content": memory.content,
        "namespace": memory.namespace,
        "depth": round(memory.depth, SCORE_DIGITS),
        "access_count": memory.access_count,
        "last_accessed": memory.last_accessed,
        "created_at": memory.created_at,
        "source": from_json(memory.source),
        "expires_at": memory.expires_at,
        "supersedes": memory.supersedes,
        "superseded_by": memory.superseded_by,
        "active": memory.active(now),
        "related_to": list(memory.related_to),
        "contradicts": list(memory.contradicts),
        "near_duplicates": list(memory.near_duplicates),
        "last_confirmation_evidence": memory.last_confirmation_evidence,
        "validity": validity_view(memory, now),
        "keys": keys,
        "about": agent_keys_text(state, state.links.key_flags(memory.id)),
    }


def find_key(state: GraphState, key_id: str, namespace: str) -> KeyRecord:
    key = state.keys.get(key_id)
    if key is None or key.namespace != namespace:
        raise NotFound(f"key {key_id} not found (key ids are the 12-hex ids recall returns)")
    return key


def _relevance_of(body: dict[str, Any]) -> dict[str, float] | None:
    raw = body.get("relevance")
    if raw is None:
        return None
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
        for k, v in raw.items()
    ):
        raise BadRequest("relevance must be an object of memory_id -> number")
    return {k: float(v) for k, v in raw.items()}


def read_key(state: GraphState, raw: Any, now: float) -> dict[str, Any]:
    """A key's active memories as ranked handles; ``relevance`` (from the router) ranks a hub."""
    body = body_of(raw)
    key = find_key(state, req_str(body, "key_id"), namespace_of(body))
    limit = opt_int(body, "limit", 10, 1, READ_KEY_MAX_LIMIT)
    offset = opt_int(body, "offset", 0, 0, 10_000_000)
    relevance = _relevance_of(body)
    scored: list[tuple[float, float, str, float, float]] = []
    for memory_id, link in state.key_links[key.id].items():
        memory = state.memories[memory_id]
        if not memory.active(now):
            continue
        rel = 1.0 if relevance is None else relevance.get(memory_id, 0.0)
        fresh = freshness(memory, now)
        score = rel * link.weight * depth_factor(memory.depth) * freshness_factor(fresh)
        scored.append((score, memory.created_at, memory_id, rel, link.weight))
    page = heapq.nlargest(offset + limit, scored)[offset:]
    handles = []
    for score, _created, memory_id, rel, weight in page:
        memory = state.memories[memory_id]
        handles.append(
            {
                "memory_id": memory_id,
                "evidence": "unread",
                "depth": round(memory.depth, SCORE_DIGITS),
                "created_at": memory.created_at,
                "namespace": memory.namespace,
                "validity": validity_view(memory, now),
                "link_weight": round(weight, SCORE_DIGITS),
                "content_relevance": None if relevance is None else round(rel, SCORE_DIGITS),
                "score_kind": "link_rank" if relevance is None else "within_key_rank",
                "score": round(score, SCORE_DIGITS + 3),
            }
        )
    total = len(scored)
    return {
        "key": key_view(state, key),
        "memories": handles,
        "total": total,
        "next_offset": offset + limit if offset + limit < total else None,
    }


def browse_keys(state: GraphState, raw: Any) -> dict[str, Any]:
    body = body_of(raw)
    namespace = namespace_of(body)
    hubs_only = opt_bool(body, "hubs_only", False)
    limit = opt_int(body, "limit", 20, 1, BROWSE_MAX_LIMIT)
    offset = opt_int(body, "offset", 0, 0, 10_000_000)
    index = state.indexes.get(namespace)
    rows = []
    for key_id in index.ids if index else ():
        count = state.active_count.get(key_id, 0)
        if count <= 0 or (hubs_only and count < state.hub_min_links):
            continue
        rows.append((count >= state.hub_min_links, count, state.keys[key_id].concept, key_id))
    rows.sort(key=lambda r: (not r[0], -r[1], r[2]))
    return {
        "status": "ok" if rows else "empty_namespace",
        "namespace": namespace,
        "memory_count": state.active_in(namespace, time.time()),
        "key_count": len(rows),
        "keys": [key_view(state, state.keys[r[3]]) for r in rows[offset : offset + limit]],
        "next_offset": offset + limit if offset + limit < len(rows) else None,
    }


def history(state: GraphState, raw: Any, now: float) -> dict[str, Any]:
    """Every version of a memory's chain, oldest first (nothing is pruned)."""
    body = body_of(raw)
    memory_id = req_str(body, "memory_id")
    namespace = namespace_of(body)
    memory = state.memories.get(memory_id)
    if memory is None or memory.namespace != namespace:
        raise NotFound(f"memory {memory_id} not found")
    oldest = memory
    while oldest.supersedes is not None and oldest.supersedes in state.memories:
        oldest = state.memories[oldest.supersedes]
    versions = []
    current: MemoryRecord | None = oldest
    while current is not None:
        versions.append(
            {
                "id": current.id,
                "content": current.content,
                "created_at": current.created_at,
                "supersedes": current.supersedes,
                "superseded_by": current.superseded_by,
                "active": current.active(now),
                "depth": round(current.depth, SCORE_DIGITS),
                "validity": validity_view(current, now),
            }
        )
        current = state.memories.get(current.superseded_by or "")
    head = versions[-1]["id"]
    return {"memory_id": memory_id, "current": head, "versions": versions}


def get_memories(state: GraphState, raw: Any, now: float) -> dict[str, Any]:
    body = body_of(raw)
    ids = id_list(body, "ids")
    namespace = namespace_of(body)
    include_inactive = opt_bool(body, "include_inactive", False)
    found, missing = [], []
    for memory_id in ids:
        memory = state.memories.get(memory_id)
        if (
            memory is None
            or memory.expired(now)
            or memory.namespace != namespace
            or (not include_inactive and memory.superseded_by is not None)
        ):
            missing.append(memory_id)
        else:
            found.append(memory_view(state, memory, now))
    return {"memories": found, "missing": missing}


COUNT_FIELDS = ("memories", "versions", "keys", "links")
DETAIL_FIELDS = ("hubs", "stale", "bytes")
LIST_MAX_LIMIT = 200
LIST_PREVIEW_CHARS = 200
VECTOR_ITEM_BYTES = 4  # float32


def counts(state: GraphState, raw: Any, now: float) -> dict[str, Any]:
    """Per-namespace sizes, read from the tallies the state keeps (a step per namespace, not
    per memory); ``detail`` adds hubs, stale memories and the bytes stored (every version's
    text and every key's vector), which walk each memory and key of the namespaces shown."""
    body = body_of(raw)
    namespace = namespace_filter(body)
    detail = opt_bool(body, "detail", False)
    fields = COUNT_FIELDS + (DETAIL_FIELDS if detail else ())
    expired = state.expired_current(now)
    names = [namespace] if namespace is not None else sorted(state.tallies.keys() | state.indexes)
    per_namespace: dict[str, dict[str, int]] = {}
    for ns in names:
        row = dict.fromkeys(fields, 0)
        tally = state.tallies.get(ns)
        if tally is not None:
            row["versions"] = len(tally.ids)
            row["memories"] = tally.current - expired[ns]
            row["links"] = tally.links
        index = state.indexes.get(ns)
        row["keys"] = len(index) if index is not None else 0
        if detail:
            _add_detail(state, ns, row, now)
        if namespace is not None or any(row.values()):
            per_namespace[ns] = row
    totals = {name: sum(row[name] for row in per_namespace.values()) for name in fields}
    return {**totals, "namespaces": per_namespace, "seq": state.head_seq, "epoch": state.epoch}


def _add_detail(state: GraphState, namespace: str, row: dict[str, int], now: float) -> None:
    for memory_id in state.namespace_ids(namespace):
        memory = state.memories[memory_id]
        row["bytes"] += len(memory.content.encode())
        if memory.active(now) and status_of(freshness(memory, now)) == "stale":
            row["stale"] += 1
    index = state.indexes.get(namespace)
    if index is not None:
        row["bytes"] += len(index) * (state.dim or 0) * VECTOR_ITEM_BYTES
        row["hubs"] = sum(
            1 for key_id in index.ids if state.active_count.get(key_id, 0) >= state.hub_min_links
        )


def list_memories(state: GraphState, raw: Any, now: float) -> dict[str, Any]:
    """One namespace's memories, newest first, a page at a time, their text cut to
    ``max_chars`` (``content_chars`` tells the whole length)."""
    body = body_of(raw)
    namespace = namespace_of(body)
    include_inactive = opt_bool(body, "include_inactive", False)
    limit = opt_int(body, "limit", 20, 1, LIST_MAX_LIMIT)
    offset = opt_int(body, "offset", 0, 0, 10_000_000)
    max_chars = opt_int(body, "max_chars", LIST_PREVIEW_CHARS, 1, CONTENT_MAX_CHARS)
    memories = state.memories
    chosen = [
        memories[memory_id]
        for memory_id in state.namespace_ids(namespace)
        if include_inactive or memories[memory_id].active(now)
    ]
    page = heapq.nlargest(offset + limit, chosen, key=lambda m: (m.created_at, m.id))[offset:]
    rows = []
    for memory in page:
        links = state.mem_links[memory.id]
        concepts = [
            state.keys[key_id].concept
            for key_id, _ in sorted(links.items(), key=lambda item: -item[1].weight)
        ]
        rows.append(
            {
                "id": memory.id,
                "content": memory.content[:max_chars],
                "content_chars": len(memory.content),
                "created_at": memory.created_at,
                "active": memory.active(now),
                "depth": round(memory.depth, SCORE_DIGITS),
                "access_count": memory.access_count,
                "validity": validity_view(memory, now),
                "keys": concepts,
            }
        )
    total = len(chosen)
    return {
        "namespace": namespace,
        "total": total,
        "memories": rows,
        "next_offset": offset + limit if offset + limit < total else None,
    }
