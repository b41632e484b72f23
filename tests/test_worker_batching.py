"""Batch methods in the worker runtime: queued requests coalesce into one handler call.

Each test holds the worker busy in a plain method so that concurrent requests pile up on its
socket, then checks what the batch handler saw and what every caller got back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq

from keymem.protocol import envelope
from keymem.protocol.client import Client
from keymem.protocol.codec import pack
from keymem.protocol.errors import BadRequest, DeadlineExceeded, KeymemError
from keymem.protocol.worker import Service
from keymem.services.stack import InprocStack
from tests.wire import direct_reply

HOLD_S = 0.3  # long enough for every test thread to have its request queued
# A bound on a hold that waits for the test: a failing test does not leave its worker stuck.
RELEASE_WAIT_S = 60.0


class Recorder:
    def __init__(self) -> None:
        self.calls: list[list[Any]] = []
        self.lock = threading.Lock()
        self.holding = threading.Event()  # ``hold_until_released`` is running
        self.release = threading.Event()

    def sizes(self) -> list[int]:
        return [len(call) for call in self.calls]


def _service(recorder: Recorder, *, max_batch: int = 64) -> Service:
    service = Service("batcher", capacity=32)

    @service.method("hold")
    def hold(body: Any) -> str:
        time.sleep(HOLD_S)
        return "held"

    @service.method("hold_until_released")
    def hold_until_released(body: Any) -> str:
        recorder.holding.set()
        recorder.release.wait(RELEASE_WAIT_S)
        return "held"

    @service.method("double", batch=True, max_batch=max_batch)
    def double(bodies: list[Any]) -> list[Any]:
        recorder.calls.append(list(bodies))
        if any(body == "explode" for body in bodies):
            raise RuntimeError("one body in this batch is poison")
        return [BadRequest("negative") if body < 0 else body * 2 for body in bodies]

    return service


def _concurrently(stack: InprocStack, bodies: list[Any], timeout_ms: int = 5_000) -> list[Any]:
    """Hold the worker, then call ``double`` once per body from its own thread and client."""
    results: list[Any] = [None] * len(bodies)
    clients = [stack.client(timeout_ms=timeout_ms) for _ in bodies]
    holder = stack.client()
    for client in clients:
        client.call("batcher", "ping")  # connected before the worker is held

    def call(index: int) -> None:
        try:
            results[index] = clients[index].call("batcher", "double", bodies[index])
        except KeymemError as exc:
            results[index] = exc

    hold_thread = threading.Thread(target=holder.call, args=("batcher", "hold"))
    hold_thread.start()
    time.sleep(0.05)  # the hold is running in the worker
    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    hold_thread.join()
    return results


@pytest.fixture
def stack() -> Iterator[InprocStack]:
    """The default heartbeat: the conftest's fast one (300 ms) is as short as ``HOLD_S``, and a
    worker held that long would be declared dead by the router."""
    with InprocStack() as running:
        yield running


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def _start(stack: InprocStack, recorder: Recorder, **kwargs: Any) -> None:
    stack.add_worker(_service(recorder, **kwargs), direct=True)


def test_queued_requests_share_one_handler_call(stack: InprocStack, recorder: Recorder) -> None:
    _start(stack, recorder)
    results = _concurrently(stack, list(range(12)))
    assert results == [i * 2 for i in range(12)]
    assert max(recorder.sizes()) > 1, recorder.sizes()
    assert sum(recorder.sizes()) == 12


def test_single_request_still_works_through_router_and_direct(
    stack: InprocStack, recorder: Recorder
) -> None:
    _start(stack, recorder)
    assert stack.client().call("batcher", "double", 21) == 42
    direct = stack.workers[0].worker.direct_endpoint
    assert direct is not None
    with Client(direct, context=stack.context) as client:
        assert client.call("batcher", "double", 5) == 10
    assert recorder.sizes() == [1, 1]


def test_error_item_reaches_only_its_caller(stack: InprocStack, recorder: Recorder) -> None:
    _start(stack, recorder)
    results = _concurrently(stack, [1, -1, 3])
    assert results[0] == 2 and results[2] == 6
    assert isinstance(results[1], BadRequest)


def test_a_raising_batch_is_retried_body_by_body(stack: InprocStack, recorder: Recorder) -> None:
    _start(stack, recorder)
    results = _concurrently(stack, [1, "explode", 3, 4])
    assert [results[0], results[2], results[3]] == [2, 6, 8]
    assert isinstance(results[1], KeymemError) and results[1].code.value == "internal"
    # the service is still up and serving
    assert stack.client().call("batcher", "double", 7) == 14


def test_max_batch_bounds_each_call(stack: InprocStack, recorder: Recorder) -> None:
    _start(stack, recorder, max_batch=4)
    results = _concurrently(stack, list(range(10)))
    assert results == [i * 2 for i in range(10)]
    assert max(recorder.sizes()) <= 4
    assert sum(recorder.sizes()) == 10


def test_expired_requests_never_reach_the_handler(stack: InprocStack, recorder: Recorder) -> None:
    """Requests whose deadline passes while they wait behind a busy handler get a ``timeout``
    reply from the worker, and the batch handler never sees them. They go to the worker's own
    endpoint and the handler in front of them ends only once their deadline has passed: what
    expired is then known, however slowly a loaded box delivers them (through the router, one
    late enough would be refused before it reached the worker)."""
    _start(stack, recorder)
    direct = stack.workers[0].worker.direct_endpoint
    assert direct is not None
    holder = stack.client(timeout_ms=round(RELEASE_WAIT_S * 1000))
    hold_thread = threading.Thread(target=holder.call, args=("batcher", "hold_until_released"))
    hold_thread.start()
    sockets = [stack.context.socket(zmq.DEALER) for _ in range(3)]
    try:
        assert recorder.holding.wait(RELEASE_WAIT_S), "the hold never started"
        deadline_ms = envelope.now_ms() + 100
        for index, sock in enumerate(sockets):
            sock.connect(direct)
            request = envelope.Request(b"r%d" % index, "batcher", "double", deadline_ms, pack(1))
            sock.send_multipart(request.frames())
        while envelope.now_ms() <= deadline_ms:
            time.sleep(0.01)
    finally:
        recorder.release.set()
        hold_thread.join()
    for sock in sockets:
        try:
            assert sock.poll(round(RELEASE_WAIT_S * 1000)), "no reply from the worker"
            reply = envelope.parse_reply(sock.recv_multipart())
            assert reply.status == DeadlineExceeded.code.value.encode()
        finally:
            sock.close(linger=0)
    assert recorder.calls == []
    assert stack.workers[0].worker.stats.expired == 3


def test_undecodable_body_is_a_typed_error_for_that_request(
    stack: InprocStack, recorder: Recorder
) -> None:
    _start(stack, recorder)
    request = envelope.Request(b"r1", "batcher", "double", envelope.now_ms() + 2000, b"\xc1")
    direct = stack.workers[0].worker.direct_endpoint
    assert direct is not None
    reply = direct_reply(stack.context, direct, request, 2000)
    assert reply.status == b"bad_request"
    assert recorder.calls == []


def test_invalid_batch_limits_are_refused() -> None:
    service = Service("x")
    handler: Callable[[list[Any]], list[Any]] = list
    with pytest.raises(ValueError):
        service.add("m", handler, batch=True, max_batch=0)
