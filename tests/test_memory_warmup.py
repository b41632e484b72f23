"""The memory service's idle-time pass: the graph's memories without a vector are embedded
(one model call warms the reranker and makes the dense leg's vector), never while a request
is in flight, and nothing is lost when a round fails. A real graph file and real vectors (the
shipped model, tests/vectors.py)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keymem.protocol.worker import HeartbeatPolicy, Service
from keymem.services import graph
from keymem.services.memory import service as memory
from keymem.services.memory.warmup import Warmer
from keymem.services.router.process import ORCHESTRATION_LIVENESS
from keymem.services.stack import InprocStack
from tests.full_stack import shared_embedder
from tests.vectors import remember_body, vectors

WAIT_S = 10.0  # for a thread on a loaded box; the checks below never wait this long when green
CLIENTS: dict[int, Any] = {}
# The stack's embedder's: the memories' vectors must come from the graph's recorded embedder.
FINGERPRINT = shared_embedder().fingerprint
TEXTS = ["one fact", "two facts", "three facts", "four facts", "five facts"]
BURST_GAP_S = 2.0  # longer than any pause of the burst test's client, even on a loaded box


class RecordingReranker:
    """A ``reranker`` worker that records each ``warm`` call's passages (and can be held),
    answering with the passages' real vectors as the cosine scorer does, or (``embeds``
    False, a cross-encoder) without them."""

    def __init__(self, embeds: bool = True) -> None:
        self.embeds = embeds
        self.calls: list[list[str]] = []
        self.release = threading.Event()
        self.release.set()

    def warm(self, body: Any) -> dict[str, Any]:
        self.release.wait(WAIT_S)
        self.calls.append(list(body["passages"]))
        answer: dict[str, Any] = {"cached": len(body["passages"]), "score_kind": "recorded"}
        if self.embeds and body.get("vectors"):
            answer.update(vectors=vectors(body["passages"]), fingerprint=FINGERPRINT)
        return answer

    def service(self) -> Service:
        service = Service("reranker")
        service.add("warm", self.warm, idempotent=True)
        return service


def wait_for(condition: Any) -> None:
    give_up = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < give_up, "timed out"
        time.sleep(0.005)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[InprocStack]:
    """A router with a real graph holding ``TEXTS``, written in order, none vectorised."""
    with InprocStack() as running:
        running.add_worker(graph.build(running.settings(tmp_path)))
        client = running.client()
        for text in TEXTS:
            client.call("graph", "remember", remember_body(text, [text], fingerprint=FINGERPRINT))
        CLIENTS[id(running)] = client
        yield running
        CLIENTS.pop(id(running))


def missing(stack: InprocStack) -> int:
    """Memories still without a vector (one client per stack: a poll must not open sockets)."""
    client = CLIENTS.get(id(stack)) or CLIENTS.setdefault(id(stack), stack.client())
    return int(client.call("graph", "vector_backlog", {})["missing"])


class HeldService:
    """A ``memory``-like worker whose ``read`` stays in flight until released."""

    def __init__(self, warmer: Warmer) -> None:
        self.warmer = warmer
        self.entered = threading.Event()
        self.release = threading.Event()

    def read(self, body: Any) -> dict[str, Any]:
        self.entered.set()
        self.release.wait(WAIT_S)
        return {}

    def start(self, stack: InprocStack) -> threading.Thread:
        """Serve (yielding to the warmer) and call ``read`` from another thread; returns once
        the worker holds it."""
        service = Service("memory")
        service.add("read", self.read, idempotent=True)
        self.warmer.yield_to(service)
        stack.add_worker(service, heartbeat=HeartbeatPolicy(100, ORCHESTRATION_LIVENESS))
        client = stack.client(timeout_ms=int(WAIT_S * 1000))
        thread = threading.Thread(target=client.call, args=("memory", "read", {}))
        thread.start()
        assert self.entered.wait(WAIT_S)
        return thread


def test_no_model_call_while_a_request_is_in_flight_then_newest_first(
    stack: InprocStack,
) -> None:
    """A recall in flight keeps the model: the backlog is embedded in the pause after it,
    newest first (the memories an agent is likeliest to ask about next), in groups."""
    reranker = RecordingReranker()
    stack.add_worker(reranker.service())
    warmer = Warmer(
        stack.endpoints.frontend, window_s=0.05, burst_gap_s=0.0, per_call=2, poll_s=WAIT_S
    )
    held = HeldService(warmer)
    try:
        reading = held.start(stack)
        warmer.written()
        time.sleep(10 * warmer.window_s)  # many windows: a warmer that does not wait has sent
        assert reranker.calls == []
        assert missing(stack) == len(TEXTS)
        held.release.set()
        reading.join(WAIT_S)
        wait_for(lambda: missing(stack) == 0)
        newest_first = [["five facts", "four facts"], ["three facts", "two facts"], ["one fact"]]
        assert reranker.calls == newest_first
    finally:
        held.release.set()
        warmer.close()
    assert warmer.stats() == {"sent": 5, "calls": 3, "stored": 5, "failed": 0}


def test_a_burst_of_writes_keeps_the_model_until_the_writes_pause(
    stack: InprocStack, tmp_path: Path
) -> None:
    """Batches through the memory service whose pauses outlast the idle window (a loaded
    box's client) but not the burst's gap: no warm-up between them; once they stop, every
    memory gets its vector."""
    from keymem.services.embedder.service import make_service as embedder_service

    reranker = RecordingReranker()
    stack.add_worker(reranker.service())
    stack.add_worker(embedder_service(shared_embedder()))
    warmer = Warmer(stack.endpoints.frontend, window_s=0.05, burst_gap_s=BURST_GAP_S, poll_s=WAIT_S)
    service = memory.make_service(
        stack.endpoints.frontend, config=stack.settings(tmp_path).config, warmer=warmer
    )
    stack.add_worker(service, heartbeat=HeartbeatPolicy(100, ORCHESTRATION_LIVENESS))
    client = stack.client(timeout_ms=int(WAIT_S * 1000))
    batches, size = 4, 5
    try:
        for batch in range(batches):
            items = [
                {"content": f"burst {batch} fact {i}", "keys": [f"burst {batch}"]}
                for i in range(size)
            ]
            client.call("memory", "remember_batch", {"items": items})
            time.sleep(4 * warmer.window_s)  # a pause the window alone would warm in
        assert reranker.calls == []
        wait_for(lambda: missing(stack) == 0)
    finally:
        warmer.close()
    assert warmer.stats()["stored"] == len(TEXTS) + batches * size


def test_a_write_wakes_a_warmer_that_waits_a_poll(stack: InprocStack) -> None:
    """A write reaches a warm-up thread asleep for a whole poll (the first look comes one poll
    after start): its memories get their vectors once the writes pause, not a poll later. A
    write during a burst wakes nothing (the thread reads the burst's end when its wait ends),
    so this wake-up is the only one a write makes."""
    reranker = RecordingReranker()
    stack.add_worker(reranker.service())
    warmer = Warmer(
        stack.endpoints.frontend, window_s=0.0, burst_gap_s=0.05, per_call=8, poll_s=3 * WAIT_S
    )
    try:
        warmer.start()
        time.sleep(0.2)  # the thread is in its first poll's wait
        assert reranker.calls == []
        warmer.written()
        wait_for(lambda: missing(stack) == 0)  # within WAIT_S: a third of the poll
    finally:
        warmer.close()
    assert reranker.calls == [TEXTS[::-1]]


def test_a_reranker_that_does_not_embed_leaves_the_vectors_to_the_embedder(
    stack: InprocStack,
) -> None:
    """A cross-encoder warms its own way; the embedder makes the memories' vectors then."""
    from keymem.services.embedder.service import make_service as embedder_service

    reranker = RecordingReranker(embeds=False)
    stack.add_worker(reranker.service())
    stack.add_worker(embedder_service(shared_embedder()))
    warmer = Warmer(
        stack.endpoints.frontend, window_s=0.0, burst_gap_s=0.0, per_call=8, poll_s=WAIT_S
    )
    try:
        warmer.start()
        warmer.written()  # as a write would: no first poll to wait for
        wait_for(lambda: missing(stack) == 0)
    finally:
        warmer.close()
    assert reranker.calls == [TEXTS[::-1]]  # warmed all the same
    assert warmer.stats()["stored"] == len(TEXTS)


def test_a_reranker_that_is_off_leaves_the_vectors_to_the_embedder(stack: InprocStack) -> None:
    """KEYMEM_RERANK=false: nothing to warm, and the dense leg still gets its vectors."""
    from keymem.services.embedder.service import make_service as embedder_service
    from keymem.services.reranker.service import disabled_service
    from keymem.services.reranker.settings import RerankerSettings

    stack.add_worker(disabled_service(RerankerSettings()))
    stack.add_worker(embedder_service(shared_embedder()))
    warmer = Warmer(
        stack.endpoints.frontend, window_s=0.0, burst_gap_s=0.0, per_call=8, poll_s=WAIT_S
    )
    try:
        warmer.start()
        warmer.written()  # as a write would: no first poll to wait for
        wait_for(lambda: missing(stack) == 0)
    finally:
        warmer.close()
    assert warmer.stats() == {"sent": 5, "calls": 1, "stored": 5, "failed": 0}


def test_a_failed_round_is_logged_and_its_memories_wait_for_the_next(
    stack: InprocStack, caplog: pytest.LogCaptureFixture
) -> None:
    # no reranker and no embedder at all: the router refuses each call
    warmer = Warmer(stack.endpoints.frontend, window_s=0.0, poll_s=0.05)
    with caplog.at_level(logging.WARNING, logger="keymem.memory.warmup"):
        warmer.start()
        wait_for(lambda: warmer.stats()["failed"] >= 2)
    assert caplog.text.count("memory vectors not made") == 1  # once a minute, not per round
    assert missing(stack) == len(TEXTS)
    stack.add_worker(RecordingReranker().service())  # back: the same memories are made
    try:
        wait_for(lambda: missing(stack) == 0)
    finally:
        warmer.close()
