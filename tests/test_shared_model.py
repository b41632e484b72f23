"""The embedder and the reranker sharing one process and one model (services/shared_model.py).

By default they run as one supervised program, ``models``; each still registers with the router
as its own service and shows in ``keymem status``, and a ``kill -9`` of the process brings both
back. A cross-encoder, no reranking, or ``KEYMEM_SHARED_MODEL=false`` keeps a process each.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.protocol.errors import KeymemError
from keymem.services import shared_model
from keymem.services.catalog import placement
from keymem.services.config import ALL_PROGRAMS, load
from tests.supervised import Deployment, running_deployment

RECOVERY_TIMEOUT_S = 120.0  # a model load on a loaded machine
POLL_S = 0.2


@pytest.mark.parametrize(
    ("env", "shared"),
    [
        ({}, True),
        ({"KEYMEM_SHARED_MODEL": "false"}, False),
        ({"KEYMEM_RERANK": "false"}, False),
        ({"KEYMEM_RERANK_MODEL_PATH": "/models/cross-encoder"}, False),
    ],
)
def test_the_pair_shares_a_process_only_when_they_share_a_model(
    env: dict[str, str], shared: bool
) -> None:
    programs = placement(load(env, home=Path("/nonexistent")))
    hosted = [service for services in programs.values() for service in services]
    assert sorted(hosted) == sorted(ALL_PROGRAMS)  # every service runs exactly once
    assert (shared_model.PROGRAM in programs) == shared
    if shared:
        assert programs[shared_model.PROGRAM] == ("embedder", "reranker")


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    with running_deployment() as deployed:
        yield deployed


def pids(deployment: Deployment, timeout_ms: int = 1_000) -> dict[str, int]:
    with Client(ipc_endpoints(deployment.home).frontend, timeout_ms=timeout_ms) as client:
        return {name: client.call(name, "ping")["pid"] for name in ("embedder", "reranker")}


@pytest.mark.supervised
def test_both_services_run_in_one_process_and_both_show(deployment: Deployment) -> None:
    report = deployment.wait_all_running()
    found = pids(deployment)
    assert found["embedder"] == found["reranker"]
    for name in ("embedder", "reranker"):
        row = report["services"][name]
        assert (row["program"], row["pid"], row["workers"]) == ("models", found[name], 1)
        assert row["log"].endswith("models.log")
    assert "embedder and reranker share one process (models)" in deployment.keymem("status").stdout
    with Client(ipc_endpoints(deployment.home).frontend) as client:
        vectors = client.call("embedder", "embed", {"texts": ["strawberries"], "kind": "query"})
        scored = client.call(
            "reranker", "score", {"query": "snack", "passages": ["I love strawberries"]}
        )
    assert vectors["dim"] == 512 and len(scored["scores"]) == 1


@pytest.mark.supervised
def test_kill_9_of_the_shared_process_brings_both_back(deployment: Deployment) -> None:
    old = pids(deployment)["embedder"]
    os.kill(old, signal.SIGKILL)
    give_up = time.monotonic() + RECOVERY_TIMEOUT_S
    while True:
        try:
            found = pids(deployment)
            if set(found.values()) != {old}:
                break
        except KeymemError:
            pass
        assert time.monotonic() < give_up, "embedder and reranker did not come back"
        time.sleep(POLL_S)
    assert found["embedder"] == found["reranker"] != old
    assert deployment.wait_all_running()["services"]["reranker"]["pid"] == found["reranker"]
