"""An in-process stack stops every worker it started, also one that never registered.

A worker thread left running reconnects every heartbeat expiry for the rest of the test
process (the known leak of a loaded CI run): the stack must own it from its start.
"""

from __future__ import annotations

import threading

import pytest

from keymem.protocol.worker import Service
from keymem.services.stack import InprocStack
from tests.conftest import FAST_HEARTBEAT


def test_a_worker_that_never_registers_is_stopped_with_the_stack() -> None:
    with (
        pytest.raises(RuntimeError, match="did not register"),
        InprocStack(heartbeat=FAST_HEARTBEAT) as stack,
    ):
        stack.broker.stop()  # the router is gone: the worker can never register
        router = next(t for t in threading.enumerate() if t.name == "router")
        router.join(timeout=10)  # stop() only asks; a live loop would still take the worker
        assert not router.is_alive()
        stack.add_worker(Service("orphan"))
    assert not [t for t in threading.enumerate() if t.name.startswith("orphan")]
