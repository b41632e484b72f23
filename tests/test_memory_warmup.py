"""The memory service's reranker warm-up: grouped off the write's path, never lost unsaid."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from keymem.protocol.worker import Service
from keymem.services.memory.warmup import WARM_DUTY_SHARE, Warmer
from keymem.services.stack import InprocStack

WAIT_S = 10.0  # for a thread on a loaded box; the checks below never wait this long when green


class RecordingReranker:
    """A ``reranker`` worker that records each ``warm`` call's passages (and can be held)."""

    def __init__(self, busy_s: float = 0.0) -> None:
        self.busy_s = busy_s  # model time each call takes
        self.calls: list[list[str]] = []
        self.spans: list[tuple[float, float]] = []  # each call's (start, end), monotonic
        self.release = threading.Event()
        self.release.set()
        self.entered = threading.Event()

    def warm(self, body: Any) -> dict[str, Any]:
        started = time.monotonic()
        self.entered.set()
        self.release.wait(WAIT_S)
        time.sleep(self.busy_s)
        self.calls.append(list(body["passages"]))
        self.spans.append((started, time.monotonic()))
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


def test_passages_within_the_window_share_one_call(stack: InprocStack) -> None:
    reranker = RecordingReranker()
    stack.add_worker(reranker.service())
    warmer = Warmer(stack.endpoints.frontend, window_s=WAIT_S / 2, per_call=4)
    try:
        warmer.add(["one"])
        warmer.add(["two", "  ", None, 3])  # blanks and non-text are not passages
        warmer.add(["three"])
        assert reranker.calls == []  # the window of "one" has not passed, nor 4 gathered
        warmer.add(["four", "five"])  # four gathered: sent without waiting out the window
        wait_for(lambda: len(reranker.calls) == 1)
        assert reranker.calls == [["one", "two", "three", "four"]]
    finally:
        warmer.close()  # sends what waits at once
    assert reranker.calls == [["one", "two", "three", "four"], ["five"]]
    assert warmer.stats() == {"sent": 5, "calls": 2, "failed": 0, "dropped": 0, "pending": 0}


def test_a_lone_passage_goes_when_its_window_ends(stack: InprocStack) -> None:
    reranker = RecordingReranker()
    stack.add_worker(reranker.service())
    warmer = Warmer(stack.endpoints.frontend, window_s=0.05)
    try:
        warmer.add(["alone"])
        wait_for(lambda: reranker.calls == [["alone"]])
    finally:
        warmer.close()


def test_a_burst_takes_at_most_its_share_of_the_model(stack: InprocStack) -> None:
    """A bulk import's passages leave the model idle between warm-up calls as long as each
    call kept it busy: recalls and writes get the rest of its time."""
    reranker = RecordingReranker(busy_s=0.2)
    stack.add_worker(reranker.service())
    warmer = Warmer(stack.endpoints.frontend, window_s=0.0, per_call=1)
    try:
        warmer.add(["p1", "p2", "p3"])
        wait_for(lambda: len(reranker.spans) == 3)
    finally:
        warmer.close()
    for (start, end), (next_start, _) in zip(reranker.spans, reranker.spans[1:], strict=False):
        busy = end - start
        assert next_start - end >= busy * (1 / WARM_DUTY_SHARE - 1) * 0.9


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
    assert reranker.warmed() == ["held", "d", "e"]


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
