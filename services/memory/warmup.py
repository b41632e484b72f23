"""The memories' passage vectors, made while the memory service is idle: the reranker's
warm-up and the graph's dense leg from one model call.

A write's acknowledgement needs no passage model (issue 17: hundreds of single remembers a
second): warming fills the reranker's passage cache so that the first recall pooling a new
memory pays no model time for it, and the same vector of the memory's head, sent to the graph
(``put_memory_vectors``), is what the dense leg scans (services/graph/memory_vectors.py). One
``Warmer`` per process works through the graph's backlog of active memories without a vector
(``vector_backlog``: written since, written before the leg, imported, or made by another
embedder), newest first (the memories an agent is likeliest to ask about next), up to
``WARM_PASSAGES_PER_CALL`` at a time as one ``reranker.warm`` with ``vectors`` — one passage
at a time costs the model about twice the CPU per passage that a group does (USE-m on this
box: 5.2 vs 2.7 ms for a ~110-character memory) — and only once no request of the memory
service (a write, a recall, an inject) has been in flight for ``WARM_WINDOW_S``, nor a write
for ``WRITE_BURST_GAP_S``: during a burst of writes the model and the cores stay with the
writes, during a recall the recall does not wait behind a warm-up. A write tells the warmer to
look (``written``); with nothing
written it looks every ``BACKLOG_POLL_S`` (a start on an older file, an import), the first
time one poll after it starts. A reranker
that reads passages otherwise (a cross-encoder) or is off answers without vectors: the
embedder makes them then (a reranker that is only busy is asked again in the next round, so a
loaded box does not do the work twice).

Nothing is lost: the backlog is the graph's, so a memory whose vector was not made (a failed
call, a restart) is simply still in it; failures are counted in ``stats`` and logged as
warnings at most once per ``LOG_INTERVAL_S`` with how many since the last.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError, Unavailable
from keymem.protocol.worker import Handler, Service

log = logging.getLogger("keymem.memory.warmup")

# How long the memory service must have had no request in flight before the warm-up takes the
# model (seconds): longer than the pause between one client's back-to-back reads on a quiet box
# (a few ms of MCP and router hops), short enough not to hold the backlog up.
WARM_WINDOW_S = 0.2
# How long after the last write the warm-up still waits (seconds). One client's back-to-back
# writes are one burst: the pause between two of them is the client's and the front end's
# handling of the previous call (a batch of 100: ~70 ms of CPU on a quiet box, 0.2-0.46 s
# measured at load 22, docs/history/batch-rate-2026-12-02e.md), longer than WARM_WINDOW_S on
# a loaded box, where a warm round in each pause took a fifth of the burst's CPU. A memory is
# still warm about a second after the burst, before an agent's next turn.
WRITE_BURST_GAP_S = 1.0
# Passages per reranker call: each call is a fraction of a second of model time, so a recall
# arriving during one waits little; between calls the warmer looks again whether it is idle.
WARM_PASSAGES_PER_CALL = 16
# A warm-up still waiting after this is not worth the model time any more: the reranker drops
# it unread rather than make recalls wait behind it (the memories stay in the backlog).
WARM_BUDGET_MS = 1_000
# With nothing written, how often the graph's backlog is looked at; also the pause after a
# failed round, so a service that is down is not asked in a loop.
BACKLOG_POLL_S = 5.0
JOIN_TIMEOUT_S = 2.0
LOG_INTERVAL_S = 60.0


class Warmer:
    """Works through the graph's backlog of memories without a vector on its own thread, while
    the services it ``yield_to``s have been idle for ``window_s``."""

    def __init__(
        self,
        router_endpoint: str,
        *,
        window_s: float = WARM_WINDOW_S,
        burst_gap_s: float = WRITE_BURST_GAP_S,
        per_call: int = WARM_PASSAGES_PER_CALL,
        poll_s: float = BACKLOG_POLL_S,
    ) -> None:
        self.router_endpoint = router_endpoint
        self.window_s = window_s
        self.burst_gap_s = burst_gap_s
        self.per_call = per_call
        self.poll_s = poll_s
        self._ready = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._in_flight = 0  # requests of the served service being handled now
        self._active_at = time.monotonic()  # when one last ended or a write was announced
        self._wake_at = math.inf  # when the thread's timed wait ends (inf: none)
        self._awaits_requests = False  # the thread waits for the requests in flight to end
        self._written_at = time.monotonic() - burst_gap_s  # when a write was last announced
        # when the backlog is next worth a look: at start, one poll later (the services a
        # deployment starts beside the router are not all live yet), or at the first write
        self._look_at = time.monotonic() + poll_s
        self.sent = 0  # passages the reranker (or the embedder) was asked to embed
        self.calls = 0
        self.stored = 0  # memory vectors the graph took
        self.failed = 0  # rounds that failed (their memories stay in the backlog)
        self._unlogged = 0  # failures since the last warning
        self._logged_at = -LOG_INTERVAL_S

    def written(self) -> None:
        """A write was acknowledged: look at the backlog once the writes pause for
        ``burst_gap_s``. The thread is woken only when it would sleep past that (a poll's
        wait); during a burst each write moves the end of the pause later, which the waiting
        thread reads when its wait ends, so a write costs no thread switch on its way back."""
        with self._ready:
            now = time.monotonic()
            self._look_at = self._active_at = self._written_at = now
            due = now + max(self.window_s, self.burst_gap_s)
            if not self._awaits_requests and self._wake_at > due:
                self._ready.notify()

    def start(self) -> None:
        """Start the thread (once)."""
        with self._ready:
            if self._thread is None and not self._stopping:
                self._thread = threading.Thread(target=self._run, name="warmup", daemon=True)
                self._thread.start()

    def yield_to(self, service: Service) -> Service:
        """``service``, its handlers wrapped so that the warm-up waits while any of them runs
        and for ``window_s`` after (the services of one process share one warmer); the warmer
        starts."""
        for name, method in service.methods.items():
            service.methods[name] = dataclasses.replace(
                method, handler=self._yielding(method.handler)
            )
        self.start()
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
                if not self._in_flight and self._awaits_requests:
                    self._ready.notify()

    def close(self) -> None:
        """Stop the thread (within ``JOIN_TIMEOUT_S``); what is left stays in the backlog."""
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
                "stored": self.stored,
                "failed": self.failed,
            }

    def _idle(self) -> bool:
        """Wait until the backlog is worth a look, the service has been idle for the window
        and the writes have paused for the burst's gap; False when stopping."""
        with self._ready:
            try:
                while not self._stopping:
                    if self._in_flight:  # woken by the last one to end
                        self._awaits_requests = True
                        self._ready.wait()
                        self._awaits_requests = False
                        continue
                    now = time.monotonic()
                    left = (
                        max(
                            self._look_at,
                            self._active_at + self.window_s,
                            self._written_at + self.burst_gap_s,
                        )
                        - now
                    )
                    if left <= 0:
                        return True
                    self._wake_at = now + left
                    self._ready.wait(left)
                    self._wake_at = math.inf
                return False
            finally:
                self._awaits_requests = False
                self._wake_at = math.inf

    def _run(self) -> None:
        # The socket lives and dies on this thread (a zmq socket is not thread-safe).
        with Client(self.router_endpoint, timeout_ms=WARM_BUDGET_MS) as client:
            while self._idle():
                try:
                    more = self._round(client)
                except KeymemError as exc:
                    self._failed(exc)
                    more = False
                if not more:
                    with self._ready:
                        self._look_at = max(self._look_at, time.monotonic() + self.poll_s)

    def _round(self, client: Client) -> bool:
        """Embed the newest memories of the backlog and hand their vectors to the graph;
        whether any were waiting."""
        backlog = client.call("graph", "vector_backlog", {"limit": self.per_call})
        waiting = backlog["memories"]
        if not waiting:
            return False
        heads = [memory["head"] for memory in waiting]
        vectors, fingerprint = self._embed(client, heads)
        stored = client.call(
            "graph",
            "put_memory_vectors",
            {
                "memory_ids": [memory["memory_id"] for memory in waiting],
                "vectors": vectors,
                "fingerprint": fingerprint,
            },
        )
        with self._ready:
            self.sent += len(heads)
            self.stored += int(stored["stored"])
        return True

    def _embed(self, client: Client, heads: list[str]) -> tuple[Any, str]:
        """The heads' passage vectors: the reranker's warm-up makes them when it embeds
        passages (one model call for both), the embedder otherwise."""
        with self._ready:
            self.calls += 1
        try:
            warmed = client.call("reranker", "warm", {"passages": heads, "vectors": True})
        except Unavailable as exc:
            if not exc.detail.get("disabled"):
                raise  # busy: the round fails and is tried again, not done twice
            warmed = {}  # off (KEYMEM_RERANK=false): the vectors still matter
        if "vectors" in warmed:
            return warmed["vectors"], str(warmed["fingerprint"])
        embedded = client.call("embedder", "embed", {"texts": heads, "kind": "passage"})
        return embedded["vectors"], str(embedded["fingerprint"])

    def _failed(self, exc: KeymemError) -> None:
        """Count a failed round; warn with the count since the last warning when
        ``LOG_INTERVAL_S`` has passed."""
        with self._ready:
            self.failed += 1
            self._unlogged += 1
            now = time.monotonic()
            if now - self._logged_at < LOG_INTERVAL_S:
                return
            unlogged, self._unlogged, self._logged_at = self._unlogged, 0, now
        log.warning("memory vectors not made in %d rounds: %s", unlogged, exc)
