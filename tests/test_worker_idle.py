"""Idle work in the worker runtime (``Service.when_idle``): slices of deferred work run while no
request waits, a request waits for one slice at most, and the heartbeat is never starved."""

from __future__ import annotations

import threading
import time

from keymem.protocol.worker import HeartbeatPolicy, Service
from keymem.services.stack import InprocStack

SLICE_S = 0.02
WAIT_S = 30.0
# a heartbeat far longer than the call's deadline: a worker that held a request back until
# its next beat would miss the deadline
SLOW_BEAT = HeartbeatPolicy(interval_ms=5_000, liveness=3)
CALL_DEADLINE_MS = 1_000
# a beat shorter than the endless idle work below: a worker that did not stop for its beat
# would be declared dead
FAST_BEAT = HeartbeatPolicy(interval_ms=100, liveness=3)


class Work:
    """``slices`` slices of idle work (None: endless), each ``SLICE_S`` long."""

    def __init__(self, slices: int | None) -> None:
        self.left = slices
        self.done = 0
        self.finished = threading.Event()

    def slice(self) -> bool:
        if self.left == 0:  # asked again on a later loop turn: new work may have come
            return False
        time.sleep(SLICE_S)
        self.done += 1
        if self.left is None:
            return True
        self.left -= 1
        if self.left == 0:
            self.finished.set()
        return self.left > 0


def service(work: Work) -> Service:
    svc = Service("svc")
    svc.add("echo", lambda body: body)
    svc.when_idle(work.slice)
    return svc


def test_idle_work_runs_to_its_end_while_no_request_comes() -> None:
    work = Work(slices=25)
    with InprocStack() as stack:
        stack.add_worker(service(work))
        assert work.finished.wait(WAIT_S)
    assert work.done == 25


def test_a_request_waits_for_one_slice_of_idle_work_at_most() -> None:
    work = Work(slices=None)
    with InprocStack(heartbeat=SLOW_BEAT) as stack:
        stack.add_worker(service(work))
        client = stack.client(timeout_ms=CALL_DEADLINE_MS)
        for i in range(5):
            before = work.done
            assert client.call("svc", "echo", {"n": i}) == {"n": i}
            give_up = time.monotonic() + WAIT_S
            while work.done == before:  # and the work goes on after the reply
                assert time.monotonic() < give_up, "idle work stopped after a request"
                time.sleep(SLICE_S)


def test_endless_idle_work_keeps_its_worker_registered() -> None:
    work = Work(slices=None)
    with InprocStack(heartbeat=FAST_BEAT) as stack:
        running = stack.add_worker(service(work))
        identity = running.worker.identity
        time.sleep(FAST_BEAT.expiry_ms * 5 / 1000)
        assert stack.client(timeout_ms=CALL_DEADLINE_MS).call("svc", "echo", "x") == "x"
        assert running.worker.registrations == 1
        assert identity in stack.broker.workers
    assert work.done > 0
