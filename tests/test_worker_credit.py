"""A request that expires inside a worker still returns the worker's capacity to the router."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from keymem.protocol.errors import DeadlineExceeded
from keymem.protocol.worker import Service
from keymem.services.stack import InprocStack

HOLD_S = 0.25  # under the fast heartbeat's liveness (0.3 s), over the short deadline
SHORT_DEADLINE_MS = 100


def _service() -> Service:
    service = Service("slow", capacity=2)

    @service.method()
    def hold(body: Any) -> str:
        time.sleep(HOLD_S)
        return "held"

    @service.method(idempotent=True)
    def echo(body: Any) -> Any:
        return body

    return service


def _in_flight(stack: InprocStack) -> int:
    stats = stack.client().call("router", "stats", {})
    return int(sum(w["in_flight"] for w in stats["services"]["slow"]["workers"]))


def test_an_expired_request_frees_its_slot_at_the_router(stack: InprocStack) -> None:
    stack.add_worker(_service())
    holder = stack.client(timeout_ms=5_000)
    holder.call("slow", "echo", 0)  # connected before the race starts
    thread = threading.Thread(target=holder.call, args=("slow", "hold", None))
    thread.start()
    time.sleep(0.05)  # hold is running; the next request waits in the worker behind it
    with pytest.raises(DeadlineExceeded):
        stack.client().call("slow", "echo", 1, timeout_ms=SHORT_DEADLINE_MS)
    thread.join()
    give_up = time.monotonic() + 2.0
    while _in_flight(stack) and time.monotonic() < give_up:
        time.sleep(0.02)
    # before the fix the worker dropped it silently and the router kept the slot forever:
    # a capacity-1 worker (the reranker) then timed out every request that followed
    assert _in_flight(stack) == 0
    assert stack.client().call("slow", "echo", 2) == 2
