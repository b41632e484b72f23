"""A session brief: the few durable facts of a namespace worth knowing before the first prompt.

Durable means the memory has earned it: confirmed on evidence, deepened, read again, and still
fresh. Stale memories are left out (they must not be asserted), transient ones too (they are
plans, not facts). Ranked by depth, then confirmations, then reads, then freshness.
"""

from __future__ import annotations

import heapq
from typing import Any

from keymem.protocol.fields import body_of, opt_int
from keymem.services.graph.requests import namespace_of
from keymem.services.graph.state import GraphState
from keymem.services.graph.validity import freshness, status_of, validity_view

BRIEF_LIMIT_DEFAULT = 5
BRIEF_LIMIT_MAX = 20
EXCLUDED_PROFILES = ("transient",)


def brief(state: GraphState, raw: Any, now: float) -> dict[str, Any]:
    body = body_of(raw)
    namespace = namespace_of(body)
    limit = opt_int(body, "limit", BRIEF_LIMIT_DEFAULT, 1, BRIEF_LIMIT_MAX)
    ranked = []
    for memory in state.memories.values():
        if memory.namespace != namespace or not memory.active(now):
            continue
        if memory.decay_profile in EXCLUDED_PROFILES:
            continue
        fresh = freshness(memory, now)
        if status_of(fresh) == "stale":
            continue
        rank = (memory.depth, memory.confirmation_count, memory.access_count, fresh)
        ranked.append((rank, memory.id))
    best = heapq.nlargest(limit, ranked)
    return {
        "namespace": namespace,
        "memories": [
            {
                "id": memory_id,
                "content": state.memories[memory_id].content,
                "namespace": namespace,
                "depth": round(state.memories[memory_id].depth, 3),
                "access_count": state.memories[memory_id].access_count,
                "validity": validity_view(state.memories[memory_id], now),
            }
            for _, memory_id in best
        ],
    }
