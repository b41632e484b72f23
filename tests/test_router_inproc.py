"""The router and worker runtime in one process (inproc sockets, the same code as deployed)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import zmq

from keymem.protocol import envelope
from keymem.protocol.async_client import AsyncClient
from keymem.protocol.client import Client
from keymem.protocol.codec import pack
from keymem.protocol.endpoints import ipc_endpoints, prepare_run_dir, tcp_endpoints
from keymem.protocol.errors import (
    BadRequest,
    DeadlineExceeded,
    InternalError,
    NotFound,
    TooLarge,
    Unavailable,
)
from keymem.protocol.worker import HeartbeatPolicy, Service
from keymem.services.identity import this_install
from keymem.services.router.broker import MAX_BODY_BYTES
from keymem.services.stack import InprocStack
from tests.ports import free_port_pair
from tests.wire import direct_reply

# A call on a later event loop that nothing reads would end here, not be answered.
LATER_LOOP_TIMEOUT_MS = 2_000


LATE_WAIT_S = 30.0  # a bound on a handler that waits for its caller's timeout


@pytest.fixture
def stack() -> Iterator[InprocStack]:
    """The shipped heartbeat: nothing here that uses it measures how fast a death is noticed,
    and the tests' 0.3 s drops the worker of a process that a loaded box leaves unscheduled
    that long (a late reply's or an oversized body's test then fails with ``unavailable``)."""
    with InprocStack() as running:
        yield running


def tagged_service(tag: str) -> Service:
    """A test service whose replies say which worker served them."""
    service = Service("svc")

    @service.method(idempotent=True)
    def whoami(body: Any) -> str:
        return tag

    @service.method(idempotent=True)
    def echo(body: Any) -> Any:
        return body

    @service.method()
    def sleep(body: Any) -> str:
        time.sleep(float(body))
        return tag

    @service.method()
    def fail(body: Any) -> None:
        if body == "missing":
            raise NotFound("memory m-404 does not exist", {"id": "m-404"})
        raise ValueError("boom")

    return service


def late_service(tag: str, answered: threading.Event) -> Service:
    """``tagged_service`` with ``late``, which replies once ``answered`` is set: after its
    caller has the timeout, however long a loaded box takes to get there."""
    service = tagged_service(tag)

    @service.method()
    def late(body: Any) -> str:
        answered.wait(LATE_WAIT_S)
        return "late"

    return service


def test_request_reply_builtins_and_stats(stack: InprocStack) -> None:
    stack.add_worker(tagged_service("a"))
    client = stack.client()
    assert client.call("svc", "echo", {"k": [1, "ü"]}) == {"k": [1, "ü"]}
    assert client.call("svc", "ping")["pong"] is True
    assert client.call("router", "ping")["service"] == "router"
    version = client.call("router", "version")
    assert {k: version[k] for k in ("version", "path")} == this_install().to_wire()
    assert Path(version["path"], "services", "router", "broker.py").is_file()
    stats = client.call("router", "stats")
    assert stats["services"]["svc"]["requests"] == 1  # the ping is a probe, counted apart
    assert stats["services"]["svc"]["probes"] == 1
    assert len(stats["services"]["svc"]["workers"]) == 1
    assert client.call("svc", "stats")["requests"] >= 1


def test_handler_errors_arrive_typed_and_the_worker_keeps_serving(stack: InprocStack) -> None:
    stack.add_worker(tagged_service("a"))
    client = stack.client()
    with pytest.raises(NotFound) as missing:
        client.call("svc", "fail", "missing")
    assert missing.value.detail == {"id": "m-404"}
    with pytest.raises(InternalError, match="ValueError: boom"):
        client.call("svc", "fail", "crash")
    assert client.call("svc", "whoami") == "a"
    errors = client.call("router", "stats")["services"]["svc"]["errors_by_code"]
    assert errors == {"not_found": 1, "internal": 1}


def test_unknown_services_and_methods_are_bad_requests(stack: InprocStack) -> None:
    stack.add_worker(tagged_service("a"))
    client = stack.client()
    with pytest.raises(BadRequest, match="unknown service 'nope'"):
        client.call("nope", "ping")
    with pytest.raises(BadRequest, match="no method 'nope'"):
        client.call("svc", "nope")
    with pytest.raises(BadRequest, match="router has no method"):
        client.call("router", "nope")


def test_a_known_service_with_no_live_worker_fails_fast() -> None:
    with InprocStack(known_services=["graph"]) as stack:
        client = stack.client(timeout_ms=5_000)
        started = time.monotonic()
        with pytest.raises(Unavailable, match="no live graph worker"):
            client.call("graph", "ping")
        assert time.monotonic() - started < 2.5  # answered, not left to hit the 5 s deadline


def test_probes_of_a_service_still_starting_are_not_errors_but_real_failures_are() -> None:
    with InprocStack(known_services=["svc"]) as stack:
        client = stack.client()
        for _ in range(3):  # what `keymem up` does while the service loads
            with pytest.raises(Unavailable):
                client.call("svc", "ping")
        stack.add_worker(tagged_service("a"))
        client.call("svc", "ping")
        with pytest.raises(BadRequest):
            client.call("svc", "nope")
        with pytest.raises(InternalError):
            client.call("svc", "fail")
        stats = client.call("router", "stats")
    svc = stats["services"]["svc"]
    assert (svc["probes"], svc["probes_failed"]) == (4, 3)
    assert (svc["requests"], svc["errors"]) == (2, 2)
    assert svc["errors_by_code"] == {"bad_request": 1, "internal": 1}
    assert stats["router"]["errors"] == 2


def test_a_late_reply_becomes_a_typed_timeout_and_is_then_discarded(stack: InprocStack) -> None:
    answered = threading.Event()
    stack.add_worker(late_service("a", answered))
    client = stack.client()
    try:
        # a deadline a loaded box still delivers the request within (else the router refuses
        # it unrun, and no late reply is made)
        with pytest.raises(DeadlineExceeded, match="no reply from svc in time"):
            client.call("svc", "late", timeout_ms=1_000)
    finally:
        answered.set()
    # the worker's late reply must not be mistaken for the answer to the next call
    assert client.call("svc", "whoami", timeout_ms=2_000) == "a"
    assert client.call("svc", "echo", 7) == 7


def test_a_worker_drops_requests_whose_deadline_already_passed(stack: InprocStack) -> None:
    running = stack.add_worker(tagged_service("a"), direct=True)
    assert running.worker.direct_endpoint is not None
    with Client(running.worker.direct_endpoint) as direct:
        stale = envelope.Request(b"old", "svc", "whoami", envelope.now_ms() - 1, pack(None))
        direct._socket.send_multipart(stale.frames())
        assert direct.call("svc", "whoami") == "a"  # served; the stale one was not
    assert running.worker.stats.expired == 1


def test_a_deadline_too_far_ahead_is_a_bad_request_and_everyone_stays_up(
    stack: InprocStack,
) -> None:
    running = stack.add_worker(tagged_service("a"), direct=True)
    assert running.worker.direct_endpoint is not None
    far = envelope.Request(b"far", "svc", "whoami", 2**62, pack(None))
    for endpoint in (stack.endpoints.frontend, running.worker.direct_endpoint):
        reply = direct_reply(stack.context, endpoint, far, timeout_ms=2_000)
        assert reply.status == b"bad_request", endpoint
    with pytest.raises(BadRequest, match="deadline is"):
        stack.client().call("svc", "whoami", timeout_ms=2**62)
    assert stack.client().call("svc", "whoami") == "a"


def test_several_workers_share_the_load(stack: InprocStack) -> None:
    stack.add_worker(tagged_service("a"))
    stack.add_worker(tagged_service("b"))

    def one_call(_: int) -> str:
        with Client(stack.endpoints.frontend) as client:
            result: str = client.call("svc", "sleep", 0.2)
            return result

    with ThreadPoolExecutor(4) as pool:
        served_by = list(pool.map(one_call, range(4)))
    assert sorted(served_by) == ["a", "a", "b", "b"]


def test_a_silent_worker_is_dropped_when_its_own_expiry_passes() -> None:
    """A worker is dead one expiry (its declared heartbeat x liveness) after it last spoke,
    not whenever the router's own beat next comes round: here a 5 s beat, and a peer that
    registers declaring 0.2 s and then says nothing, as a stopped process's socket would."""
    router_beat = HeartbeatPolicy(interval_ms=5_000, liveness=3)
    silent_expiry_s = 0.2
    with InprocStack(heartbeat=router_beat) as stack:
        peer = stack.context.socket(zmq.DEALER)
        try:
            peer.setsockopt(zmq.ROUTING_ID, b"w-silent")
            peer.connect(stack.endpoints.backend)
            ready = {
                "service": "svc",
                "methods": {"whoami": {"idempotent": True}},
                "pid": 0,
                "heartbeat_ms": 100,
                "liveness": round(silent_expiry_s * 1000 / 100),
            }
            peer.send_multipart(envelope.control(envelope.READY, pack(ready)))
            give_up = time.monotonic() + 5
            while b"w-silent" not in stack.broker.workers:
                assert time.monotonic() < give_up, "the peer never registered"
                time.sleep(0.005)
            registered = time.monotonic()
            while b"w-silent" in stack.broker.workers:
                # well before the router's next beat, with room for a loaded box
                assert time.monotonic() - registered < 2.5, "dropped only at the router's beat"
                time.sleep(0.01)
        finally:
            peer.close(linger=0)


def test_a_worker_that_leaves_cleanly_is_forgotten_at_once(stack: InprocStack) -> None:
    running = stack.add_worker(tagged_service("a"))
    client = stack.client()
    assert client.call("svc", "whoami") == "a"
    running.stop()
    time.sleep(0.05)
    with pytest.raises(Unavailable):
        client.call("svc", "whoami", timeout_ms=2_000)


def test_oversized_bodies_get_a_typed_error(stack: InprocStack) -> None:
    stack.add_worker(tagged_service("a"))
    # ~60-90 ms of CPU to build, send and refuse 16 MB, but seconds of wall time in a process
    # a loaded box schedules rarely: the deadline is not what this measures
    client = stack.client(timeout_ms=60_000)
    with pytest.raises(TooLarge):
        client.call("svc", "echo", b"x" * (MAX_BODY_BYTES + 1))
    assert client.call("svc", "echo", b"x" * 1000) == b"x" * 1000


def test_the_async_client_multiplexes_concurrent_calls(stack: InprocStack) -> None:
    stack.add_worker(tagged_service("a"))
    stack.add_worker(tagged_service("b"))

    async def scenario() -> list[Any]:
        async with AsyncClient(stack.endpoints.frontend) as client:
            return await asyncio.gather(*(client.call("svc", "echo", i) for i in range(200)))

    assert asyncio.run(scenario()) == list(range(200))


def test_the_async_client_answers_on_each_event_loop_it_is_used_from(stack: InprocStack) -> None:
    """A client kept across ``asyncio.run`` calls (a program's successive commands) is
    answered on the loop it is called from, not left watching the first, closed one."""
    stack.add_worker(tagged_service("a"))
    client = AsyncClient(stack.endpoints.frontend, timeout_ms=LATER_LOOP_TIMEOUT_MS)
    try:
        assert asyncio.run(client.call("svc", "echo", 1)) == 1
        assert asyncio.run(client.call("svc", "echo", 2)) == 2
    finally:
        asyncio.run(client.close())


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_the_same_router_and_workers_run_over_ipc_and_tcp(transport: str, short_home: Path) -> None:
    endpoints = (
        ipc_endpoints(short_home)
        if transport == "ipc"
        else tcp_endpoints("127.0.0.1", free_port_pair())
    )
    prepare_run_dir(endpoints)
    with InprocStack(endpoints=endpoints) as stack:
        stack.add_worker(tagged_service("a"), direct=True)
        stack.add_worker(tagged_service("b"), direct=True)
        client = stack.client()
        assert {client.call("svc", "whoami") for _ in range(10)} <= {"a", "b"}
        workers = client.call("router", "stats")["services"]["svc"]["workers"]
        assert len(workers) == 2
        for running in stack.workers:
            direct = running.worker.direct_endpoint
            assert direct is not None and direct.startswith(f"{transport}://")
            with Client(direct) as straight:
                assert straight.call("svc", "echo", transport) == transport
    if transport == "ipc":
        assert oct(short_home.joinpath("run").stat().st_mode & 0o777) == "0o700"


def test_call_many_fans_out_in_parallel_and_keeps_each_outcome(stack: InprocStack) -> None:
    intervals: list[tuple[float, float]] = []
    for tag in ("a", "b"):
        service = tagged_service(tag)

        def timed_sleep(body: Any, tag: str = tag) -> str:
            started = time.monotonic()
            time.sleep(float(body))
            intervals.append((started, time.monotonic()))
            return tag

        service.add("timed_sleep", timed_sleep)
        stack.add_worker(service)
    client = stack.client()
    outcomes = client.call_many(
        [
            ("svc", "timed_sleep", 0.2),
            ("svc", "timed_sleep", 0.2),
            ("svc", "fail", "missing"),
            ("nope", "ping", None),
        ],
        timeout_ms=2_000,
    )
    assert sorted(outcomes[:2]) == ["a", "b"]  # one sleep on each worker
    assert isinstance(outcomes[2], NotFound) and isinstance(outcomes[3], BadRequest)
    (start_1, end_1), (start_2, end_2) = intervals
    assert start_2 < end_1 and start_1 < end_2  # the two sleeps overlapped: they ran in parallel


def test_call_many_reports_a_missing_reply_as_that_calls_timeout(stack: InprocStack) -> None:
    answered = threading.Event()
    stack.add_worker(late_service("a", answered))
    stack.add_worker(late_service("b", answered))
    client = stack.client()
    try:
        calls = [("svc", "echo", 1), ("svc", "late", None)]
        fast, slow = client.call_many(calls, timeout_ms=1_000)
    finally:
        answered.set()
    assert fast == 1
    assert isinstance(slow, DeadlineExceeded)
