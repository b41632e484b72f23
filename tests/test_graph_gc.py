"""The graph worker collects cyclic garbage between requests, never inside one."""

from __future__ import annotations

import gc
import threading
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from keymem.protocol.worker import HeartbeatPolicy, Service
from keymem.services.graph import make_service
from keymem.services.graph import service as graph_service
from keymem.services.stack import InprocStack
from tests.graph_helpers import open_graph

TICK_S = 0.05  # the policy's interval in these tests (the service's is GC_INTERVAL_S)
WRITES = 60
SEARCHES = 200
KEYS = 6
DIM = 512
SETTLE_S = 5 * TICK_S
# The first tick walks whatever the test process made before the worker started; a busy box
# must not make that look like a dead worker.
PATIENT = HeartbeatPolicy(interval_ms=500, liveness=20)


class Cycle:
    """An object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@dataclass
class Watch:
    """Which handler runs now (set by the wrapped handlers) and every collection seen."""

    serving: threading.Event = field(default_factory=threading.Event)
    in_requests: list[int] = field(default_factory=list)  # generations collected while serving
    between: list[int] = field(default_factory=list)
    cycles: list[weakref.ref[Cycle]] = field(default_factory=list)
    kept: list[list[int]] = field(default_factory=list)  # long-lived objects made by requests

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            seen = self.in_requests if self.serving.is_set() else self.between
            seen.append(info["generation"])

    def wrap(self, service: Service, name: str) -> None:
        method = service.methods[name]
        handler = method.handler

        def watched(body: Any) -> Any:
            self.serving.set()
            try:
                # garbage a request leaves in a cycle, and an object that outlives it
                self.cycles.append(weakref.ref(Cycle()))
                self.kept.append([len(self.kept)])
                return handler(body)
            finally:
                self.serving.clear()

        service.methods[name] = replace(method, handler=watched)


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(graph_service, "GC_INTERVAL_S", TICK_S)
    probe = Watch()
    gc.callbacks.append(probe)
    yield probe
    gc.callbacks.remove(probe)


def _remember_body(rng: np.random.Generator, i: int) -> dict[str, Any]:
    return {
        "content": f"fact {i} about topic {i % 7} and thing {i % 11}",
        "keys": [f"topic {i % 7}", f"thing {i % 11}"] + [f"word {i} {k}" for k in range(KEYS - 2)],
        "key_vectors": rng.standard_normal((KEYS, DIM)).astype(np.float32),
    }


@pytest.fixture
def stack() -> Any:
    with InprocStack(heartbeat=PATIENT) as running:
        yield running


def test_no_collection_runs_inside_a_request_and_ticks_free_cycles(
    stack: InprocStack, tmp_path: Path, watch: Watch
) -> None:
    was_enabled = gc.isenabled()
    graph = open_graph(tmp_path)
    service = make_service(graph)
    for name in ("remember", "recall_candidates"):
        watch.wrap(service, name)
    running = stack.add_worker(service)
    client = stack.client(timeout_ms=20_000)
    rng = np.random.default_rng(7)
    for i in range(WRITES):
        client.call("graph", "remember", _remember_body(rng, i))
    for i in range(SEARCHES):
        body = {
            "text": f"what about topic {i % 7}",
            "vector": rng.standard_normal(DIM).astype(np.float32),
            "hops": 2,
        }
        client.call("graph", "recall_candidates", body)
    threading.Event().wait(SETTLE_S)  # a few ticks after the last request

    # Enough requests ran that the automatic collector would have run inside some
    # (it collects every 700 net allocations of container objects).
    assert watch.in_requests == []
    assert 2 in watch.between  # the ticks ran, between requests
    assert all(ref() is None for ref in watch.cycles)  # every request's cycle was collected
    # what outlived its request was frozen: no tick walks it again
    tracked = {id(o) for o in gc.get_objects()}
    assert not any(id(kept) in tracked for kept in watch.kept)
    assert gc.get_freeze_count() > 0

    running.stop()
    running.thread.join(5.0)
    assert gc.isenabled() == was_enabled  # automatic collection as it was, once stopped
