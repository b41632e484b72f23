"""The reranker's warm-up of newly written text, done while the memory service is idle.

A write's acknowledgement does not need the reranker: warming only fills its passage cache so
that the first recall pooling the new memory pays no model time for it. One passage at a time
costs the model about twice the CPU per passage that a group of eight or more does (USE-m on
this box: 5.2 vs 2.7 ms for a ~110-character memory). So the memory service hands each write's
text to one ``Warmer`` per process and replies at once; the warmer's own thread sends what has
gathered, up to ``WARM_PASSAGES_PER_CALL`` at a time as one ``reranker.warm``, only once no
request of the memory service (a write, a recall, an inject) has been in flight for
``WARM_WINDOW_S``. Warming is worth doing only with time nobody else wants: during a burst of
writes (a bulk import) it would take the model and the cores from the writes themselves, and
during a recall it would make the recall wait behind it. So a burst is written at full speed
and warmed in the pause after it, newest first (the memories an agent is likeliest to ask
about next), and a single client's remembers, a few tens of milliseconds apart, gather into
groups. A recall before the pause pays the model for the passages it pools that are not warm
yet, as it would with no warm-up at all.

Nothing is dropped silently: passages beyond ``WARM_PENDING_MAX`` (a burst longer than the
backlog) drop the oldest, and failed warm-ups (a disabled reranker refuses every one) are
logged as warnings, each kind at most once per ``LOG_INTERVAL_S`` with how many since the last;
both are counted in ``stats``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError
from keymem.protocol.worker import Handler, Service

log = logging.getLogger("keymem.memory.warmup")

# How long the memory service must have had no request in flight before the warm-up takes the
# model (seconds): longer than the pause between one client's back-to-back calls (a few ms of
# MCP and router hops), short enough that a memory is warm well before an agent's next turn.
WARM_WINDOW_S = 0.2
# Passages per reranker call: each call is a fraction of a second of model time, so a recall
# arriving during one waits little; between calls the warmer looks again whether it is idle.
WARM_PASSAGES_PER_CALL = 16
# A warm-up still waiting after this is not worth the model time any more: the reranker drops
# it unread rather than make recalls wait behind it.
WARM_BUDGET_MS = 1_000
# Passages waiting at most; a longer backlog drops the oldest (and says so).
WARM_PENDING_MAX = 4_096
JOIN_TIMEOUT_S = 2.0
LOG_INTERVAL_S = 60.0


class Warmer:
    """Gathers passages to warm and sends them to the reranker in groups, on its own thread,
    while the service it ``yield_to``s has been idle for ``window_s``."""

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
        self._pending: deque[str] = deque(maxlen=pending_max)  # oldest first
        self._ready = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._in_flight = 0  # requests of the served service being handled now
        self._active_at = time.monotonic()  # when one last ended or passages last arrived
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
            self._pending.extend(texts)
            self._active_at = time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="warmup", daemon=True)
                self._thread.start()
            self._ready.notify()

    def yield_to(self, service: Service) -> Service:
        """``service``, its handlers wrapped so that the warm-up waits while any of them runs
        and for ``window_s`` after (the services of one process share one warmer)."""
        for name, method in service.methods.items():
            service.methods[name] = dataclasses.replace(
                method, handler=self._yielding(method.handler)
            )
        return service

    def _yielding(self, handler: Handler) -> Handler:
        @functools.wraps(handler)
        def run(body: Any) -> Any:
            with self._busy():
                return handler(body)

        return run

    @contextlib.contextmanager
    def _busy(self) -> Iterator[None]:
        with self._ready:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._ready:
                self._in_flight -= 1
                self._active_at = time.monotonic()
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
        """The newest passages waiting, once the service has been idle for the window (at once
        when stopping); empty when stopping with nothing left."""
        with self._ready:
            while not self._stopping:
                if not self._pending or self._in_flight:
                    self._ready.wait()
                    continue
                left = self._active_at + self.window_s - time.monotonic()
                if left <= 0:
                    break
                self._ready.wait(left)
            group = [self._pending.pop() for _ in range(min(self.per_call, len(self._pending)))]
            return group[::-1]

    def _run(self) -> None:
        # The socket lives and dies on this thread (a zmq socket is not thread-safe).
        with Client(self.router_endpoint, timeout_ms=WARM_BUDGET_MS) as client:
            while group := self._next_group():
                try:
                    client.call("reranker", "warm", {"passages": group})
                except KeymemError as exc:
                    self._failed(len(group), exc)
                with self._ready:
                    self.sent += len(group)
                    self.calls += 1

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
