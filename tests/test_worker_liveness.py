"""A worker stays alive through a request longer than the heartbeat expiry while its caller
waits, and is still declared dead when it is really stuck (protocol/worker.py's pulse).

The in-process cases run a 1.5 s expiry: the tests' usual 0.3 s is shorter than a loaded box
(a test at nice 10 beside nice-0 work) may stall a process whose spinning handler holds the
GIL when it is descheduled (0.9 s failed 1 run in 6 so), and a handler that outlasts two
expiries shows the same thing. What stops a whole interpreter (a handler holding
the GIL, SIGSTOP) or starves it (a handler spinning past its deadline) runs in a worker process
of its own (liveness_worker.py).
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
from keymem.protocol.errors import DeadlineExceeded, Unavailable
from keymem.protocol.worker import HeartbeatPolicy, Service
from keymem.services.router.broker import WorkerRecord
from keymem.services.stack import InprocStack
from tests.conftest import FAST_HEARTBEAT
from tests.liveness_worker import spin_for

IN_PROCESS_HEARTBEAT = HeartbeatPolicy(interval_ms=500, liveness=3)
LONG_S = 3.2  # over two expiries of the in-process heartbeat
# The worker process's liveness: 0.6 s, loose enough for a loaded box to keep it registered.
PROCESS_HEARTBEAT = HeartbeatPolicy(interval_ms=200, liveness=3)
HOLD_S = 4.0  # a stuck handler's length: detection must come well before it ends
PROCESS_START_S = 30.0
REPO = Path(__file__).resolve().parent.parent


def long_service(tag: str) -> Service:
    service = Service("svc")

    @service.method()
    def spinning(body: Any) -> str:
        spin_for(float(body))
        return tag

    @service.method()
    def sleeping(body: Any) -> str:
        time.sleep(float(body))
        return tag

    @service.method(batch=True)
    def spinning_batch(bodies: list[Any]) -> list[str]:
        spin_for(float(max(bodies)))
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


def elsewhere_service() -> Service:
    """An in-process worker of ``svc`` beside the process, answering at once."""
    service = Service("svc")
    for name in ("whoami", "sleep_idempotent"):
        service.add(name, lambda body: "elsewhere", idempotent=True)
    return service


def process_record(stack: InprocStack, process: subprocess.Popen[bytes]) -> WorkerRecord | None:
    """The router's record of the worker process, while it is registered."""
    found = [w for w in list(stack.broker.workers.values()) if w.pid == process.pid]
    return found[0] if found else None


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
        while process_record(stack, process) is None:
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
        stack.add_worker(elsewhere_service())
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


def test_a_hung_worker_is_detected_and_routed_around(short_home: Path) -> None:
    """A handler still running past its request's deadline is hung: its worker stops
    heartbeating then, is dropped one expiry later while it still spins, calls go to another
    worker meanwhile, and once unstuck it registers again. In a process of its own: a spinning
    handler in the test's process shares the router's GIL and CPU, so when the router drops it
    measures that starved interpreter, not the router (in process CI saw 2.0 s for ~0.7 s)."""
    deadline_ms = 400
    with stack_over_ipc(short_home) as stack, worker_process(stack) as process:
        stack.add_worker(elsewhere_service(), heartbeat=PROCESS_HEARTBEAT)
        client = stack.client()
        outcome: dict[str, Any] = {}

        def call_spin() -> None:
            try:
                outcome["spin"] = client.call("svc", "spin", HOLD_S, timeout_ms=deadline_ms)
            except Exception as exc:
                outcome["spin"] = exc

        spinner = threading.Thread(target=call_spin)
        started = time.monotonic()
        spinner.start()  # to the process: the least loaded worker, registered first
        while not (record := process_record(stack, process)) or not record.in_flight:
            assert time.monotonic() - started < HOLD_S, "the spin never reached the process"
            time.sleep(0.005)
        other = stack.client()
        assert {other.call("svc", "whoami") for _ in range(5)} == {"elsewhere"}
        while process_record(stack, process) is not None:
            assert time.monotonic() - started < HOLD_S, "the hung worker was never dropped"
            time.sleep(0.01)
        spinner.join(HOLD_S)
        assert isinstance(outcome["spin"], DeadlineExceeded)
        give_up = time.monotonic() + PROCESS_START_S
        while process_record(stack, process) is None:
            assert time.monotonic() < give_up, "the recovered worker never registered again"
            time.sleep(0.05)
