"""Whatever dies, a call ends by its deadline; a call that may be repeated is, and succeeds.

The router here is the real ``Broker`` over ipc in a thread; "killing" it closes its sockets
at once, which is what a client sees of a ``kill -9``. The supervised forms of the same
promises are in test_kills.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keymem.protocol.async_client import AsyncClient
from keymem.protocol.client import Client
from keymem.protocol.endpoints import Endpoints, ipc_endpoints, prepare_run_dir
from keymem.protocol.errors import DeadlineExceeded, Unavailable, is_transient
from keymem.protocol.worker import HeartbeatPolicy, Service, Worker
from keymem.services.router.broker import Broker
from tests.conftest import FAST_HEARTBEAT

CALL_TIMEOUT_MS = 8_000
SLOW_HANDLER_S = 0.6
# The worker's own liveness outlasts its slow handler (heartbeats come from its serving loop).
SLOW_HANDLER_HEARTBEAT = HeartbeatPolicy(interval_ms=100, liveness=20)
# A worker registers with a restarted router well within its 1 s heartbeat interval.
REGISTER_AGAIN_S = 0.5
# How long a caller may wait past the moment its router died before it hears of it.
NOTICE_S = 0.5
# More calls than a socket's send queue holds (zmq's default high-water mark: 1,000 messages),
# each with a short deadline: all of them have ended well within QUEUED_CALLS_END_S.
QUEUED_CALLS = 1_500
QUEUED_CALL_TIMEOUT_MS = 300
QUEUED_CALLS_END_S = 5.0


class Router:
    """A broker thread that can be killed and started again on the same endpoints."""

    def __init__(self, endpoints: Endpoints) -> None:
        self.endpoints = endpoints
        self.broker: Broker | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.broker = Broker(
            self.endpoints.frontend,
            self.endpoints.backend,
            heartbeat=FAST_HEARTBEAT,
            known_services=["svc"],  # as the deployed router knows its services
        )
        self.thread = threading.Thread(target=self.broker.run, daemon=True)
        self.thread.start()
        assert self.broker.ready.wait(5)

    def kill(self) -> None:
        assert self.broker is not None and self.thread is not None
        self.broker.stop()
        self.thread.join(5)
        assert not self.thread.is_alive(), "the broker did not stop"

    def wait_for_worker(self, service: str) -> None:
        give_up = time.monotonic() + 5
        while (
            self.broker is None
            or not self.broker.services.get(service, None)
            or not (self.broker.services[service].workers)
        ):
            assert time.monotonic() < give_up, f"no {service} worker registered"
            time.sleep(0.01)


@contextlib.contextmanager
def _serving(router: Router, worker: Worker) -> Iterator[None]:
    """The router and a worker thread running; both stopped after, however the body ends (a
    worker left running reconnects for the rest of the session)."""
    thread = threading.Thread(target=worker.run, daemon=True)
    try:
        router.start()
        thread.start()
        yield
    finally:
        worker.stop()
        if thread.is_alive():
            thread.join(5)
        if router.thread is not None:
            router.kill()
        assert not thread.is_alive(), "the worker did not stop"


def slow_service() -> Service:
    service = Service("svc")

    @service.method(idempotent=True)
    def slow(body: Any) -> str:
        time.sleep(SLOW_HANDLER_S)
        return "done"

    return service


@pytest.fixture
def router(short_home: Path) -> Iterator[Router]:
    endpoints = ipc_endpoints(short_home)
    prepare_run_dir(endpoints)
    running = Router(endpoints)
    worker = Worker(slow_service(), endpoints.backend, heartbeat=SLOW_HANDLER_HEARTBEAT)
    with _serving(running, worker):
        running.wait_for_worker("svc")
        yield running


def _kill_during_call(router: Router, restart: bool) -> float:
    """Kill the router while a call is in flight (and start a new one); the kill's time."""
    time.sleep(SLOW_HANDLER_S / 3)
    killed_at = time.monotonic()
    router.kill()
    if restart:
        router.start()
    return killed_at


def test_a_call_in_flight_when_the_router_dies_ends_at_once(router: Router) -> None:
    with Client(router.endpoints.frontend, timeout_ms=CALL_TIMEOUT_MS) as client:
        killer = _Background(lambda: _kill_during_call(router, restart=False))
        with pytest.raises(Unavailable) as lost:
            client.call("svc", "slow")
        assert time.monotonic() - killer.result() < NOTICE_S  # not the 8 s deadline
        assert is_transient(lost.value)


def test_a_repeatable_call_is_sent_again_to_the_new_router_and_answered(router: Router) -> None:
    with Client(router.endpoints.frontend, timeout_ms=CALL_TIMEOUT_MS) as client:
        killer = _Background(lambda: _kill_during_call(router, restart=True))
        started = time.monotonic()
        assert client.call("svc", "slow", retry=True) == "done"
        killer.result()
        assert time.monotonic() - started < CALL_TIMEOUT_MS / 1000


def test_the_async_client_ends_or_repeats_its_calls_when_the_router_dies(router: Router) -> None:
    async def scenario() -> tuple[list[Any], float]:
        async with AsyncClient(router.endpoints.frontend, timeout_ms=CALL_TIMEOUT_MS) as client:
            killer = _Background(lambda: _kill_during_call(router, restart=True))
            calls = [client.call("svc", "slow", retry=i % 2 == 0) for i in range(4)]
            outcomes = await asyncio.gather(*calls, return_exceptions=True)
            return outcomes, killer.result()

    outcomes, _ = asyncio.run(scenario())
    assert outcomes[0] == outcomes[2] == "done"
    assert all(isinstance(o, Unavailable) for o in outcomes[1::2])


def test_async_calls_past_a_full_send_queue_end_by_their_deadline(short_home: Path) -> None:
    """No router listening: the socket's send queue fills, and a call that finds it full is
    told at once (transient ``unavailable``) instead of waiting for room with no deadline;
    the queued ones end at theirs."""
    endpoints = ipc_endpoints(short_home)
    prepare_run_dir(endpoints)

    async def scenario() -> list[Any]:
        async with AsyncClient(endpoints.frontend, timeout_ms=QUEUED_CALL_TIMEOUT_MS) as client:
            calls = [client.call("svc", "slow") for _ in range(QUEUED_CALLS)]
            return await asyncio.wait_for(
                asyncio.gather(*calls, return_exceptions=True), QUEUED_CALLS_END_S
            )

    outcomes = asyncio.run(scenario())
    assert any(isinstance(o, Unavailable) for o in outcomes)
    assert all(isinstance(o, Unavailable | DeadlineExceeded) for o in outcomes)


class _Background:
    """Run ``action`` in a thread; ``result`` waits for what it returned."""

    def __init__(self, action: Any) -> None:
        self._value: Any = None
        self._thread = threading.Thread(target=self._run, args=(action,), daemon=True)
        self._thread.start()

    def _run(self, action: Any) -> None:
        self._value = action()

    def result(self) -> Any:
        self._thread.join(10)
        return self._value


def test_a_worker_registers_with_a_restarted_router_at_once(short_home: Path) -> None:
    """Not at its next heartbeat (a second, as deployed): when the router's connection closes."""
    endpoints = ipc_endpoints(short_home)
    prepare_run_dir(endpoints)
    router = Router(endpoints)
    worker = Worker(slow_service(), endpoints.backend, heartbeat=HeartbeatPolicy(interval_ms=1_000))
    with _serving(router, worker):
        router.wait_for_worker("svc")
        router.kill()
        router.start()
        restarted = time.monotonic()
        router.wait_for_worker("svc")
        assert time.monotonic() - restarted < REGISTER_AGAIN_S
