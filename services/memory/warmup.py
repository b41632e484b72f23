"""The reranker's warm-up of newly written text, gathered off the write's path.

A write's acknowledgement does not need the reranker: warming only fills its passage cache so
that the first recall pooling the new memory pays no model time for it. One passage at a time
costs the model about twice the CPU per passage that a group of eight or more does (USE-m on
this box: 5.2 vs 2.7 ms for a ~110-character memory), and a single client's remembers arrive
one by one. So the memory service hands each write's text to one ``Warmer`` per process and
replies at once; the warmer's own thread waits ``WARM_WINDOW_S`` after the first passage for
more to arrive, then sends them as one ``reranker.warm`` and waits for its reply, during which
the next ones gather. A recall inside that window pays the model for the passages it pools
that are not warm yet, as it would with no warm-up at all.

Nothing is dropped silently: passages beyond ``WARM_PENDING_MAX`` (a burst the reranker cannot
keep up with, such as a bulk import) drop the oldest, and failed warm-ups (a disabled reranker
refuses every one) are logged as warnings, each kind at most once per ``LOG_INTERVAL_S`` with
how many since the last; both are counted in ``stats``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError

log = logging.getLogger("keymem.memory.warmup")

# How long the first passage waits for others to share its model call (seconds): a fifth of a
# second groups a single client's remembers in fours to eights at 20-40 per second.
WARM_WINDOW_S = 0.2
# Passages per reranker call: each call is a fraction of a second of model time, so a recall
# queued behind it on the shared model process waits little.
WARM_PASSAGES_PER_CALL = 16
# A warm-up still waiting after this is not worth the model time any more: the reranker drops
# it unread rather than make recalls wait behind it.
WARM_BUDGET_MS = 1_000
# The share of the model's time the warm-up may take: after a call of t seconds the warmer
# rests t * (1 / share - 1) before the next, so a burst of writes (a bulk import) leaves the
# rest of the model's time, and the cores it runs on, to recalls and to the writes themselves;
# what the rest cannot warm waits in the backlog.
WARM_DUTY_SHARE = 0.5
# Passages waiting at most; a longer backlog drops the oldest (and says so).
WARM_PENDING_MAX = 4_096
JOIN_TIMEOUT_S = 2.0
LOG_INTERVAL_S = 60.0


class Warmer:
    """Gathers passages to warm and sends them to the reranker in groups, on its own thread."""

    def __init__(
        self,
        router_endpoint: str,
        *,
        window_s: float = WARM_WINDOW_S,
        per_call: int = WARM_PASSAGES_PER_CALL,
        pending_max: int = WARM_PENDING_MAX,
    ) -> None:
        self.router_endpoint = router_endpoint
        self.window_s = window_s
        self.per_call = per_call
        # (when it arrived, the passage), oldest first
        self._pending: deque[tuple[float, str]] = deque(maxlen=pending_max)
        self._ready = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.sent = 0  # passages the reranker was asked to warm
        self.calls = 0
        self.failed = 0  # passages whose warm-up call failed
        self.dropped = 0  # passages dropped from a full backlog
        self._unlogged: dict[str, int] = {}  # passages lost since the last warning, by kind
        self._logged_at: dict[str, float] = {}

    def add(self, passages: Iterable[Any]) -> None:
        """Queue the non-blank strings of ``passages``; returns at once."""
        texts = [p for p in passages if isinstance(p, str) and p.strip()]
        if not texts:
            return
        with self._ready:
            if self._stopping:
                self.dropped += len(texts)
                self._lost("passages not warmed (the service is stopping)", len(texts))
                return
            overflow = len(self._pending) + len(texts) - (self._pending.maxlen or 0)
            if overflow > 0:
                self.dropped += overflow
                self._lost("oldest passages not warmed (backlog full)", overflow)
            now = time.monotonic()
            self._pending.extend((now, text) for text in texts)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="warmup", daemon=True)
                self._thread.start()
            self._ready.notify()

    def close(self) -> None:
        """Stop the thread after it has sent what is waiting (within ``JOIN_TIMEOUT_S``)."""
        with self._ready:
            self._stopping = True
            self._ready.notify()
            thread = self._thread
        if thread is not None:
            thread.join(JOIN_TIMEOUT_S)

    def stats(self) -> dict[str, int]:
        with self._ready:
            return {
                "sent": self.sent,
                "calls": self.calls,
                "failed": self.failed,
                "dropped": self.dropped,
                "pending": len(self._pending),
            }

    def _next_group(self) -> list[str]:
        """The next passages to send, once the oldest has waited its window or enough have
        gathered (at once when stopping); empty when stopping with nothing left."""
        with self._ready:
            while not self._pending and not self._stopping:
                self._ready.wait()
            while len(self._pending) < self.per_call and not self._stopping:
                left = self._pending[0][0] + self.window_s - time.monotonic()
                if left <= 0:
                    break
                self._ready.wait(left)
            count = min(self.per_call, len(self._pending))
            return [self._pending.popleft()[1] for _ in range(count)]

    def _run(self) -> None:
        # The socket lives and dies on this thread (a zmq socket is not thread-safe).
        with Client(self.router_endpoint, timeout_ms=WARM_BUDGET_MS) as client:
            while group := self._next_group():
                started = time.monotonic()
                try:
                    client.call("reranker", "warm", {"passages": group})
                except KeymemError as exc:
                    self._failed(len(group), exc)
                with self._ready:
                    self.sent += len(group)
                    self.calls += 1
                self._rest((time.monotonic() - started) * (1 / WARM_DUTY_SHARE - 1))

    def _rest(self, seconds: float) -> None:
        """Wait ``seconds`` before the next call, or less if the service is stopping."""
        until = time.monotonic() + seconds
        with self._ready:
            while not self._stopping and (left := until - time.monotonic()) > 0:
                self._ready.wait(left)

    def _failed(self, passages: int, exc: KeymemError) -> None:
        with self._ready:
            self.failed += passages
            self._lost(f"passages not warmed: {exc}", passages, kind="failed")

    def _lost(self, what: str, passages: int, kind: str = "dropped") -> None:
        """Count ``passages`` lost; warn with the count since the last warning of this kind
        when ``LOG_INTERVAL_S`` has passed (caller holds the lock)."""
        unlogged = self._unlogged.get(kind, 0) + passages
        now = time.monotonic()
        if now - self._logged_at.get(kind, -LOG_INTERVAL_S) < LOG_INTERVAL_S:
            self._unlogged[kind] = unlogged
            return
        self._unlogged[kind] = 0
        self._logged_at[kind] = now
        log.warning("reranker warm-up: %d %s", unlogged, what)
