"""A burst of batches through the real services, as deployed: the idle-time pass keeps the
models for the writes, and once the writes stop every memory is found by the lexicon and has
its passage vector."""

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
SEARCH_WAIT_S = 30.0
VECTORS_WAIT_S = 60.0  # 100 short passages take a few seconds of model time even when loaded


def reranker_requests(client: Client) -> int:
    return int(client.call("router", "stats", {})["services"]["reranker"]["requests"])


def lexicon_finds(client: Client, words: dict[str, str], seq: int) -> set[str]:
    """The memories the lexicon's search finds for their own words, once caught up to ``seq``."""
    found: set[str] = set()
    give_up = time.monotonic() + SEARCH_WAIT_S
    while time.monotonic() < give_up:
        reply = client.call(
            "lexicon",
            "search",
            {"query": " ".join(words.values()), "namespace": "default", "top_n": len(words)},
        )
        found = {hit["id"] for hit in reply["hits"]}
        if client.call("lexicon", "index_stats", {})["sync"]["seq"] >= seq:
            return found
        time.sleep(0.2)
    raise AssertionError(f"the lexicon did not reach seq {seq}")


def test_a_burst_of_batches_is_searchable_and_vectorised_once_idle() -> None:
    with running_deployment() as deployment:
        client = Client(ipc_endpoints(deployment.home).frontend, timeout_ms=20_000)
        try:
            before = reranker_requests(client)
            words: dict[str, str] = {}  # memory id -> the word only it has
            seq = 0
            for batch in range(BATCHES):
                unique = [f"zq{batch}x{i:02d}" for i in range(BATCH_SIZE)]
                items = [
                    {"content": f"batch {batch}: fact {unique[i]}", "keys": [f"topic {i % 7}"]}
                    for i in range(BATCH_SIZE)
                ]
                reply = client.call("memory", "remember_batch", {"items": items})
                words.update(zip([r["saved"] for r in reply["results"]], unique, strict=True))
                seq = max(seq, reply["seq"])
            written_at = time.monotonic()
            assert reranker_requests(client) == before  # the burst kept the model
            assert lexicon_finds(client, words, seq) == set(words)
            give_up = written_at + VECTORS_WAIT_S
            while (missing := client.call("graph", "vector_backlog", {})["missing"]) > 0:
                assert time.monotonic() < give_up, f"{missing} memories still without a vector"
                time.sleep(0.2)
            assert time.monotonic() - written_at >= WRITE_BURST_GAP_S  # made after the pause
            assert reranker_requests(client) > before
        finally:
            client.close()
