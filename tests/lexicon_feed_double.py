"""A test double of the graph's change feed, for the lexicon's sync tests.

The real graph service is being built in parallel; until it lands, this stand-in serves exactly
the agreed feed contract (``feed_head``, ``feed_snapshot``, ``feed_since``) from real data
structures, registered as service ``graph`` in an ``InprocStack`` so the lexicon reaches it over
real sockets through the router. Tests write through its Python methods (it has no write API on
the wire). It keeps a bounded event history so tests can force the ``conflict`` path.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from keymem.protocol.errors import BadRequest, Conflict
from keymem.protocol.worker import Service

MAX_SNAPSHOT_PAGE = 2000
MAX_EVENTS = 5000


@dataclass
class FeedDouble:
    epoch: str = field(default_factory=lambda: uuid.uuid4().hex)
    seq: int = 0
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    # events with seq <= floor have been dropped from history
    floor: int = 0
    since_calls: int = 0
    head_calls: int = 0

    def __post_init__(self) -> None:
        self.lock = threading.Lock()

    # -- writes (Python only) ------------------------------------------------------------------
    def put(
        self, doc_id: str, content: str, namespace: str = "ns", keys: list[str] | None = None
    ) -> int:
        with self.lock:
            doc = {"id": doc_id, "namespace": namespace, "content": content, "keys": keys or []}
            self.docs[doc_id] = doc
            return self._event("upsert", doc_id, dict(doc))

    def delete(self, doc_id: str) -> int:
        with self.lock:
            self.docs.pop(doc_id, None)
            return self._event("delete", doc_id, None)

    def other_write(self) -> int:
        """A write that touches no memory (say, a key alias): the seq moves, no event."""
        with self.lock:
            self.seq += 1
            return self.seq

    def forget_history(self) -> None:
        with self.lock:
            self.floor = self.seq
            self.events.clear()

    def replace_database(self, docs: dict[str, dict[str, Any]]) -> None:
        """As if the database file were replaced: a new epoch and a new sequence."""
        with self.lock:
            self.epoch = uuid.uuid4().hex
            self.docs = {k: dict(v) for k, v in docs.items()}
            self.seq = 1
            self.events = []
            self.floor = 1

    def _event(self, op: str, doc_id: str, doc: dict[str, Any] | None) -> int:
        self.seq += 1
        self.events.append({"seq": self.seq, "op": op, "id": doc_id, "doc": doc})
        return self.seq

    # -- the feed contract ---------------------------------------------------------------------
    def feed_head(self, body: Any) -> dict[str, Any]:
        with self.lock:
            self.head_calls += 1
            return {"seq": self.seq, "epoch": self.epoch}

    def feed_snapshot(self, body: Any) -> dict[str, Any]:
        after = body.get("after")
        limit = int(body.get("limit", MAX_SNAPSHOT_PAGE))
        if not 1 <= limit <= MAX_SNAPSHOT_PAGE:
            raise BadRequest("limit out of range")
        with self.lock:
            ids = sorted(i for i in self.docs if after is None or i > after)
            page = ids[:limit]
            more = len(ids) > limit
            return {
                "documents": [dict(self.docs[i]) for i in page],
                "next": page[-1] if more else None,
            }

    def feed_since(self, body: Any) -> dict[str, Any]:
        seq = int(body["seq"])
        limit = int(body.get("limit", MAX_EVENTS))
        if not 1 <= limit <= MAX_EVENTS:
            raise BadRequest("limit out of range")
        with self.lock:
            self.since_calls += 1
            if seq < self.floor:
                raise Conflict("history before that seq is gone", {"resnapshot": True})
            events = [e for e in self.events if e["seq"] > seq][:limit]
            return {"events": events, "head": self.seq, "epoch": self.epoch}

    def service(self) -> Service:
        service = Service("graph")
        service.add("feed_head", self.feed_head, idempotent=True)
        service.add("feed_snapshot", self.feed_snapshot, idempotent=True)
        service.add("feed_since", self.feed_since, idempotent=True)
        return service
