"""The change feed the lexicon follows (zguide's Clone pattern: snapshot + sequenced updates).

A subscriber reads ``feed_head`` (seq S), pages ``feed_snapshot`` to the end, then applies
``feed_since(S)`` and keeps polling from the last seq it applied. Every committed write that
changes an active memory's text, keys, namespace or activity appends events in the same
transaction, so nothing committed is missed. Documents in events are built at read time from
the current state (an upsert of a memory that has since left active retrieval is sent as a
delete), so applying the events in order converges to the current state.
"""

from __future__ import annotations

import heapq
from typing import Any

from keymem.protocol.errors import BadRequest, Conflict
from keymem.protocol.fields import body_of, opt_int
from keymem.services.graph.requests import opt_str
from keymem.services.graph.state import GraphState
from keymem.store.changes import OP_DELETE, OP_UPSERT
from keymem.store.database import GraphStore
from keymem.store.records import MemoryRecord

SNAPSHOT_MAX_LIMIT = 2_000
SINCE_MAX_LIMIT = 5_000
# Events kept for catching up; a subscriber further behind must re-snapshot.
RETAINED_EVENTS = 200_000


def document(state: GraphState, memory: MemoryRecord) -> dict[str, Any]:
    """What the lexicon indexes for a memory: its text and the surfaces of the keys it was
    written with. Learned links (hook learning) are left out: BM25 would count a learned key's
    words at full strength whatever the link's weight, so a weak association would act as a
    written key from the first read."""
    surfaces: list[str] = []
    for key_id, link in state.mem_links[memory.id].items():
        if not link.learned:
            surfaces.extend(state.keys[key_id].surfaces())
    return {
        "id": memory.id,
        "namespace": memory.namespace,
        "content": memory.content,
        "keys": surfaces,
    }


def head(state: GraphState) -> dict[str, Any]:
    return {"seq": state.head_seq, "epoch": state.epoch}


def snapshot(state: GraphState, raw: Any, now: float) -> dict[str, Any]:
    body = body_of(raw)
    after = opt_str(body, "after") or ""
    limit = opt_int(body, "limit", 500, 1, SNAPSHOT_MAX_LIMIT)
    page = heapq.nsmallest(
        limit + 1,
        (
            memory_id
            for memory_id, memory in state.memories.items()
            if memory_id > after and memory.active(now)
        ),
    )
    more = len(page) > limit
    page = page[:limit]
    return {
        "documents": [document(state, state.memories[m]) for m in page],
        "next": page[-1] if more else None,
        "head": state.head_seq,
        "epoch": state.epoch,
    }


def since(state: GraphState, store: GraphStore, raw: Any, now: float) -> dict[str, Any]:
    body = body_of(raw)
    seq = body.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        raise BadRequest("seq must be a non-negative integer")
    limit = opt_int(body, "limit", 1_000, 1, SINCE_MAX_LIMIT)
    if seq > state.head_seq or seq < state.first_seq - 1:
        raise Conflict(
            f"seq {seq} is outside the retained history ({state.first_seq - 1}..{state.head_seq})",
            {"resnapshot": True, "head": state.head_seq, "epoch": state.epoch},
        )
    events = []
    for event_seq, op, memory_id in store.events_after(seq, limit):
        memory = state.memories.get(memory_id)
        live = memory is not None and op == OP_UPSERT and memory.active(now)
        events.append(
            {
                "seq": event_seq,
                "op": OP_UPSERT if live else OP_DELETE,
                "id": memory_id,
                "doc": document(state, memory) if live and memory is not None else None,
            }
        )
    return {"events": events, "head": state.head_seq, "epoch": state.epoch}
