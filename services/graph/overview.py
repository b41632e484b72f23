"""``overview``: how the store grew and what it holds now, for ``keymem report``.

A read over the in-memory graph (a full pass over memories and keys: ~0.1 s at 100k memories,
asked by a person, not by agents). Growth is of what the store holds now: active memories and
keys by creation time, counted per bucket of ``bucket_s`` seconds from ``start``, with what was
created before ``start`` as a baseline, so a cumulative curve needs no second call.
"""

from __future__ import annotations

import heapq
from typing import Any

from keymem.protocol.errors import BadRequest
from keymem.protocol.fields import body_of, opt_int, opt_number
from keymem.services.graph.state import GraphState
from keymem.services.graph.validity import freshness, status_of
from keymem.store.records import KEY_TYPES

BUCKET_MIN_S = 60.0
BUCKET_MAX_S = 30 * 86_400.0
MAX_BUCKETS = 1_000
HUBS_DEFAULT = 10
HUBS_MAX = 50
VALIDITY_STATUSES = ("fresh", "aging", "stale")


class Buckets:
    """Counts per bucket of creation time; what precedes ``start`` goes to ``before``."""

    def __init__(self, start: float, bucket_s: float, count: int) -> None:
        self.start, self.bucket_s = start, bucket_s
        self.before = 0
        self.new = [0] * count

    def add(self, at: float) -> None:
        if at < self.start:
            self.before += 1
            return
        index = int((at - self.start) // self.bucket_s)
        self.new[min(index, len(self.new) - 1)] += 1

    def to_wire(self) -> dict[str, Any]:
        return {"before": self.before, "new": self.new}


def overview(state: GraphState, raw: Any, now: float) -> dict[str, Any]:
    body = body_of(raw)
    bucket_s = opt_number(body, "bucket_s", 86_400.0, BUCKET_MIN_S, BUCKET_MAX_S)
    start = opt_number(body, "start", now - 30 * 86_400.0, 0.0, now)
    count = max(1, int((now - start) // bucket_s) + 1)
    if count > MAX_BUCKETS:
        raise BadRequest(f"start and bucket_s make {count} buckets; at most {MAX_BUCKETS}")
    hubs = opt_int(body, "hubs", HUBS_DEFAULT, 0, HUBS_MAX)

    namespaces: dict[str, dict[str, Any]] = {}
    growth: dict[str, Buckets] = {}
    for memory in state.memories.values():
        row = namespaces.setdefault(
            memory.namespace, {"memories": 0, "versions": 0, **dict.fromkeys(VALIDITY_STATUSES, 0)}
        )
        row["versions"] += 1
        if not memory.active(now):
            continue
        row["memories"] += 1
        row[status_of(freshness(memory, now))] += 1
        growth.setdefault(memory.namespace, Buckets(start, bucket_s, count)).add(memory.created_at)
    for ns, row in namespaces.items():
        row["growth"] = growth.get(ns, Buckets(start, bucket_s, count)).to_wire()

    key_types = {kind: Buckets(start, bucket_s, count) for kind in KEY_TYPES}
    for key in state.keys.values():
        key_types.setdefault(key.key_type, Buckets(start, bucket_s, count)).add(key.created_at)

    top = heapq.nlargest(hubs, state.active_count.items(), key=lambda item: item[1])
    hub_rows = []
    for key_id, memories in top:
        hub = state.keys.get(key_id)
        if hub is None or memories <= 0:
            continue
        links = Buckets(start, bucket_s, count)
        for memory_id, link in state.key_links[key_id].items():
            linked = state.memories.get(memory_id)
            if linked is not None and not link.learned and linked.active(now):
                links.add(linked.created_at)
        hub_rows.append(
            {
                "concept": hub.concept,
                "namespace": hub.namespace,
                "key_type": hub.key_type,
                "memories": memories,
                "is_hub": memories >= state.hub_min_links,
                "growth": links.to_wire(),
            }
        )

    total, auto, learned = state.links.kinds()
    return {
        "now": now,
        "start": start,
        "bucket_s": bucket_s,
        "buckets": count,
        "namespaces": namespaces,
        "key_types": {
            kind: {"keys": b.before + sum(b.new), **b.to_wire()} for kind, b in key_types.items()
        },
        "hubs": hub_rows,
        "hub_min_links": state.hub_min_links,
        "links": {"total": total, "auto": auto, "learned": learned},
    }
