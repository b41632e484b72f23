"""The memory service's reranker warm-up: grouped off the write's path, never lost unsaid."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from keymem.protocol.worker import HeartbeatPolicy, Service
from keymem.services.memory.warmup import Warmer
from keymem.services.router.process import ORCHESTRATION_LIVENESS
from keymem.services.stack import InprocStack

WAIT_S = 10.0  # for a thread on a loaded box; the checks below never wait this long when green
HELD_METHODS = ("write", "read")


class RecordingReranker:
    """A ``reranker`` worker that records each ``warm`` call's passages (and can be held)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.release = threading.Event()
        self.release.set()
        self.entered = threading.Event()

    def warm(self, body: Any) -> dict[str, Any]:
        self.entered.set()
        self.release.wait(WAIT_S)
        self.calls.append(list(body["passages"]))
        return {"cached": len(body["passages"]), "score_kind": "recorded"}

    def service(self) -> Service:
        service = Service("reranker")
        service.add("warm", self.warm, idempotent=True)
        return service

    def warmed(self) -> list[str]:
        return [p for call in self.calls for p in call]


def wait_for(condition: Any) -> None:
    give_up = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < give_up, "timed out"
        time.sleep(0.005)


@pytest.fixture
def stack() -> Iterator[InprocStack]:
    with InprocStack() as running:
        yield running


class HeldService:
    """A ``memory``-like worker whose ``write`` queues its passages for warming and whose
    ``write`` and ``read`` both stay in flight until released, as a slow write or recall does."""

    def __init__(self, warmer: Warmer) -> None:
        self.warmer = warmer
        self.entered: dict[str, threading.Event] = {m: threading.Event() for m in HELD_METHODS}
        self.release: dict[str, threading.Event] = {m: threading.Event() for m in HELD_METHODS}

    def _held(self, method: str) -> None:
        self.entered[method].set()
        self.release[method].wait(WAIT_S)

    def write(self, body: Any) -> dict[str, Any]:
        self.warmer.add(body["passages"])
        self._held("write")
        return {}

    def read(self, body: Any) -> dict[str, Any]:
        self._held("read")
        return {}

    def start(self, stack: InprocStack) -> None:
        """Two workers (the router runs several memory threads), both yielding to the warmer."""
        for _ in range(2):
            service = Service("memory")
            service.add("write", self.write)
            service.add("read", self.read, idempotent=True)
            self.warmer.yield_to(service)
            stack.add_worker(service, heartbeat=HeartbeatPolicy(100, ORCHESTRATION_LIVENESS))

    def call(self, stack: InprocStack, method: str, body: Any) -> threading.Thread:
        """``method`` called from another client thread; returns once the worker holds it."""
        client = stack.client(timeout_ms=int(WAIT_S * 1000))
        thread = threading.Thread(target=client.call, args=("memory", method, body))
        thread.start()
        assert self.entered[method].wait(WAIT_S)
        return thread


def test_no_warm_up_while_a_write_or_a_read_is_in_flight(stack: InprocStack) -> None:
    """A burst of writes keeps the model and the cores: its text is warmed in the pause after
    the last request ends, whichever worker served it, in groups of ``per_call``."""
    reranker = RecordingReranker()
    stack.add_worker(reranker.service())
    warmer = Warmer(stack.endpoints.frontend, window_s=0.05, per_call=4)
    held = HeldService(warmer)
    held.start(stack)
    try:
        writing = held.call(stack, "write", {"passages": ["one", "two", "  ", "three", "four"]})
        reading = held.call(stack, "read", {})
        time.sleep(10 * warmer.window_s)  # many windows: a warmer that does not wait has sent
        assert reranker.calls == []
        held.release["write"].set()
        writing.join(WAIT_S)
        time.sleep(10 * warmer.window_s)  # the read still runs on the other worker
        assert reranker.calls == []
        assert warmer.stats()["pending"] == 4
        held.release["read"].set()
        reading.join(WAIT_S)
        wait_for(lambda: len(reranker.calls) == 1)
        assert reranker.calls == [["one", "two", "three", "four"]]
    finally:
        for event in held.release.values():
            event.set()
        warmer.close()
    assert warmer.stats() == {"sent": 4, "calls": 1, "failed": 0, "dropped": 0, "pending": 0}


def test_an_idle_service_warms_newest_first_in_groups(stack: InprocStack) -> None:
    """After a burst, the memories written last (the likeliest to be asked about next) are the
    first warm."""
    reranker = RecordingReranker()
    stack.add_worker(reranker.service())
    warmer = Warmer(stack.endpoints.frontend, window_s=0.05, per_call=2)
    try:
        warmer.add(["one", "two", None, 3, "three"])  # blanks and non-text are not passages
        wait_for(lambda: len(reranker.calls) == 2)
        assert reranker.calls == [["two", "three"], ["one"]]
    finally:
        warmer.close()


def test_a_full_backlog_drops_the_oldest_and_says_so(
    stack: InprocStack, caplog: pytest.LogCaptureFixture
) -> None:
    reranker = RecordingReranker()
    stack.add_worker(reranker.service())
    warmer = Warmer(stack.endpoints.frontend, window_s=0.0, per_call=1, pending_max=2)
    try:
        reranker.release.clear()
        warmer.add(["held"])
        assert reranker.entered.wait(WAIT_S)  # the thread waits inside its call
        with caplog.at_level(logging.WARNING, logger="keymem.memory.warmup"):
            warmer.add(["a", "b", "c", "d"])
        assert warmer.stats()["dropped"] == 2
        assert "2 oldest passages not warmed" in caplog.text
        with caplog.at_level(logging.WARNING, logger="keymem.memory.warmup"):
            warmer.add(["e"])  # within the minute: counted, not logged again
        assert warmer.stats()["dropped"] == 3
        assert caplog.text.count("not warmed") == 1
        reranker.release.set()
    finally:
        warmer.close()
    assert reranker.warmed() == ["held", "e", "d"]


def test_a_failed_warm_up_is_counted_and_logged(
    stack: InprocStack, caplog: pytest.LogCaptureFixture
) -> None:
    # no reranker worker at all: the router refuses each call
    warmer = Warmer(stack.endpoints.frontend, window_s=0.0)
    with caplog.at_level(logging.WARNING, logger="keymem.memory.warmup"):
        warmer.add(["lost cause"])
        wait_for(lambda: warmer.stats()["failed"] == 1)
    warmer.close()
    assert "1 passages not warmed: " in caplog.text
    assert warmer.stats()["sent"] == 1
