"""A worker stays alive through a request longer than the heartbeat expiry while its caller
waits, and is still declared dead when it is really stuck (protocol/worker.py's pulse).

The in-process cases run a 1.5 s expiry: the tests' usual 0.3 s is shorter than a loaded box
(a test at nice 10 beside nice-0 work) may stall a process whose spinning handler holds the
GIL when it is descheduled (0.9 s failed 1 run in 6 so), and a handler that outlasts two
expiries shows the same thing. What stops a whole interpreter (a handler holding
the GIL, SIGSTOP) runs in a worker process of its own (liveness_worker.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keymem.protocol.endpoints import ipc_endpoints, prepare_run_dir
from keymem.protocol.errors import Unavailable
from keymem.protocol.worker import HeartbeatPolicy, Service
from keymem.services.stack import InprocStack
from tests.conftest import FAST_HEARTBEAT

IN_PROCESS_HEARTBEAT = HeartbeatPolicy(interval_ms=500, liveness=3)
LONG_S = 3.2  # over two expiries of the in-process heartbeat
# The worker process's liveness: 0.6 s, loose enough for a loaded box to keep it registered.
PROCESS_HEARTBEAT = HeartbeatPolicy(interval_ms=200, liveness=3)
HOLD_S = 4.0  # a stuck handler's length: detection must come well before it ends
PROCESS_START_S = 30.0
REPO = Path(__file__).resolve().parent.parent


def spin(seconds: float) -> None:
    """Pure-Python work on the serving thread: it takes the GIL whenever it can."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def long_service(tag: str) -> Service:
    service = Service("svc")

    @service.method()
    def spinning(body: Any) -> str:
        spin(float(body))
        return tag

    @service.method()
    def sleeping(body: Any) -> str:
        time.sleep(float(body))
        return tag

    @service.method(batch=True)
    def spinning_batch(bodies: list[Any]) -> list[str]:
        spin(float(max(bodies)))
        return [tag] * len(bodies)

    return service


@pytest.mark.parametrize("method", ["spinning", "sleeping", "spinning_batch"])
def test_a_request_longer_than_the_heartbeat_expiry_keeps_its_worker(method: str) -> None:
    with InprocStack(heartbeat=IN_PROCESS_HEARTBEAT) as stack:
        running = stack.add_worker(long_service("a"))
        identity = running.worker.identity
        client = stack.client(timeout_ms=10_000)
        # not idempotent: a worker declared dead meanwhile would answer `unavailable`
        assert client.call("svc", method, LONG_S) == "a"
        assert running.worker.registrations == 1
        assert identity in stack.broker.workers


@contextlib.contextmanager
def stack_over_ipc(home: Path) -> Iterator[InprocStack]:
    endpoints = ipc_endpoints(home)
    prepare_run_dir(endpoints)
    with InprocStack(endpoints=endpoints, heartbeat=FAST_HEARTBEAT) as stack:
        yield stack


@contextlib.contextmanager
def worker_process(stack: InprocStack) -> Iterator[subprocess.Popen[bytes]]:
    """tests/liveness_worker.py registered with ``stack``; stopped (and thawed) at the end."""
    policy = PROCESS_HEARTBEAT
    args = [stack.endpoints.backend, str(policy.interval_ms), str(policy.liveness)]
    process = subprocess.Popen([sys.executable, "-m", "tests.liveness_worker", *args], cwd=REPO)
    try:
        give_up = time.monotonic() + PROCESS_START_S
        while not any(w.pid == process.pid for w in list(stack.broker.workers.values())):
            assert process.poll() is None, "the worker process exited"
            assert time.monotonic() < give_up, "the worker process never registered"
            time.sleep(0.02)
        yield process
    finally:
        process.send_signal(signal.SIGCONT)
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_a_handler_holding_the_gil_is_declared_dead_within_the_expiry(short_home: Path) -> None:
    with stack_over_ipc(short_home) as stack, worker_process(stack):
        client = stack.client(timeout_ms=30_000)
        started = time.monotonic()
        with pytest.raises(Unavailable, match="stopped answering heartbeats"):
            client.call("svc", "hold_gil", HOLD_S)
        # the pulse needs the GIL: the worker is dead ~0.6 s in, not when the handler returns
        assert time.monotonic() - started < HOLD_S


def test_a_stopped_worker_process_is_declared_dead_and_its_request_retried_elsewhere(
    short_home: Path,
) -> None:
    with stack_over_ipc(short_home) as stack, worker_process(stack) as process:
        elsewhere = Service("svc")
        elsewhere.add("sleep_idempotent", lambda body: "elsewhere", idempotent=True)
        stack.add_worker(elsewhere)
        client = stack.client(timeout_ms=30_000)
        outcome: dict[str, Any] = {}

        def call() -> None:
            outcome["reply"] = client.call("svc", "sleep_idempotent", HOLD_S)

        caller = threading.Thread(target=call)
        started = time.monotonic()
        caller.start()  # to the process: the least loaded worker, registered first
        time.sleep(0.3)
        os.kill(process.pid, signal.SIGSTOP)
        caller.join(HOLD_S * 2)
        assert outcome.get("reply") == "elsewhere"
        assert time.monotonic() - started < HOLD_S
