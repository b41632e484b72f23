"""The idle-time pass as deployed: a burst of batches through the real services keeps the
models for the writes, and once the writes stop every memory gets its passage vector."""

from __future__ import annotations

import time

import pytest

from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.services.memory.warmup import WRITE_BURST_GAP_S
from tests.supervised import running_deployment

pytestmark = pytest.mark.supervised

BATCHES = 5
BATCH_SIZE = 20
VECTORS_WAIT_S = 60.0  # 100 short passages take a few seconds of model time even when loaded


def reranker_requests(client: Client) -> int:
    return int(client.call("router", "stats", {})["services"]["reranker"]["requests"])


def test_a_burst_of_batches_leaves_every_memory_with_a_vector_once_idle() -> None:
    with running_deployment() as deployment:
        client = Client(ipc_endpoints(deployment.home).frontend, timeout_ms=20_000)
        try:
            before = reranker_requests(client)
            for batch in range(BATCHES):
                items = [
                    {"content": f"batch {batch}: fact number {i}", "keys": [f"topic {i % 7}"]}
                    for i in range(BATCH_SIZE)
                ]
                client.call("memory", "remember_batch", {"items": items})
            written_at = time.monotonic()
            assert reranker_requests(client) == before  # the burst kept the model
            give_up = written_at + VECTORS_WAIT_S
            while (missing := client.call("graph", "vector_backlog", {})["missing"]) > 0:
                assert time.monotonic() < give_up, f"{missing} memories still without a vector"
                time.sleep(0.2)
            assert time.monotonic() - written_at >= WRITE_BURST_GAP_S  # made after the pause
            assert reranker_requests(client) > before
        finally:
            client.close()
