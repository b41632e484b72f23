"""The agent-facing ``memory`` service: writes get real key vectors, reads reach the graph."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from keymem.protocol.client import Client
from keymem.protocol.errors import BadRequest, Conflict, Unavailable
from keymem.protocol.worker import HeartbeatPolicy, Service
from keymem.services import graph
from keymem.services.embedder.service import Embedder
from keymem.services.embedder.service import make_service as embedder_service
from keymem.services.memory import service as memory
from keymem.services.router.process import ORCHESTRATION_LIVENESS
from keymem.services.stack import InprocStack, RunningWorker
from tests.full_stack import fresh_embedder

WARM_WAIT_S = 10.0  # the warm-up's window on a loaded box


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return fresh_embedder()


class Deployed:
    def __init__(self, stack: InprocStack, embedder_worker: RunningWorker) -> None:
        self.stack = stack
        self.embedder_worker = embedder_worker
        self.client: Client = stack.client(timeout_ms=10_000)

    def call(self, method: str, body: Any) -> Any:
        return self.client.call("memory", method, body)

    def counts(self) -> dict[str, Any]:
        result: dict[str, Any] = self.client.call("graph", "counts", {})
        return result


@pytest.fixture
def deployed(embedder: Embedder, tmp_path: Path) -> Iterator[Deployed]:
    with InprocStack() as stack:
        embedder_worker = stack.add_worker(embedder_service(embedder))
        settings = stack.settings(tmp_path)
        stack.add_worker(graph.build(settings))
        stack.add_worker(
            memory.make_service(stack.endpoints.frontend, config=settings.config),
            heartbeat=HeartbeatPolicy(stack.heartbeat.interval_ms, ORCHESTRATION_LIVENESS),
        )
        yield Deployed(stack, embedder_worker)


def test_remember_stores_real_key_vectors_that_match_across_languages(
    deployed: Deployed,
) -> None:
    saved = deployed.call(
        "remember",
        {
            "content": "Newton saw an apple fall and thought of gravity",
            "keys": ["apple", "gravity"],
        },
    )
    assert saved["saved"]
    query = deployed.client.call("embedder", "embed", {"texts": ["사과"], "kind": "query"})
    matched = deployed.client.call(
        "graph", "match_keys", {"vector": query["vectors"][0], "top_k": 3, "learn": False}
    )
    # the Korean word for apple finds the key stored from English: the vectors are real
    assert matched["keys"] and matched["keys"][0]["concept"] == "apple"
    handles = deployed.call("read_key", {"key_id": matched["keys"][0]["key_id"]})
    assert [h["memory_id"] for h in handles["memories"]] == [saved["saved"]]


def test_a_batch_larger_than_one_embed_call_is_split_and_saved_whole(deployed: Deployed) -> None:
    items = [
        {
            "content": f"fact number {i} about topic {i % 7}",
            "keys": [f"topic {i % 7}", f"item {i}", f"fact {i}"],
        }
        for i in range(100)
    ]  # 300 keys: more than one embed request may carry
    result = deployed.call("remember_batch", {"items": items})
    assert len(result["results"]) == 100 and all(r["saved"] for r in result["results"])
    assert deployed.counts()["memories"] == 100


def test_a_store_of_another_model_gets_no_mixed_vectors(deployed: Deployed) -> None:
    """Keys the store holds keep their stored vectors, but a write that also needs the embedder
    (another model, another width) is refused by the graph as a space mismatch instead of
    failing on rows of two widths; one under held keys only stays in the store's space."""
    small = np.eye(1, 8, dtype=np.float32)
    deployed.client.call(
        "graph",
        "remember",
        {
            "content": "The harbour",
            "keys": ["harbour"],
            "key_vectors": small,
            "fingerprint": "small",
        },
    )
    with pytest.raises(Conflict) as refused:
        deployed.call("remember", {"content": "The harbour keeper", "keys": ["harbour", "keeper"]})
    assert refused.value.detail["fingerprint_mismatch"] is True
    assert deployed.counts()["memories"] == 1
    saved = deployed.call("remember", {"content": "Boats in the harbour", "keys": ["harbour"]})
    assert saved["saved"]
    assert deployed.counts()["keys"] == 1


def test_blank_keys_are_dropped_and_unusable_ones_get_the_graphs_error(deployed: Deployed) -> None:
    saved = deployed.call("remember", {"content": "the user likes tea", "keys": ["  ", "tea"]})
    assert saved["saved"]
    with pytest.raises(BadRequest, match="every key must be a string"):
        deployed.call("remember", {"content": "x y z", "keys": ["fine", 42]})
    with pytest.raises(Unavailable, match="none could be extracted"):
        # no usable key and no lexicon here to extract one: refused, and said why
        deployed.call("remember", {"content": "only blanks", "keys": ["", " "]})
    with pytest.raises(BadRequest):
        deployed.call("remember", ["not", "a", "map"])
    assert deployed.counts()["memories"] == 1


def test_without_an_embedder_a_write_is_refused_cleanly(deployed: Deployed) -> None:
    deployed.embedder_worker.stop()
    with pytest.raises(Unavailable, match="cannot embed keys"):
        deployed.call("remember", {"content": "strawberries are red", "keys": ["strawberry"]})
    assert deployed.counts()["memories"] == 0


def test_a_write_warms_the_reranker_so_the_first_recall_pays_no_model_time(
    tmp_path: Path,
) -> None:
    from tests.full_stack import shared_reranker, start_services

    real = shared_reranker()
    warmed: list[str] = []

    def warm(body: Any) -> Any:
        warmed.extend(body["passages"])
        return real.methods["warm"].handler(body)

    observed = Service("reranker")  # the real reranker, its warm-ups recorded
    for name, method in real.methods.items():
        observed.add(name, warm if name == "warm" else method.handler, idempotent=True)
    content = "The user's bicycle is a green steel randonneur bought in Kyoto"
    with InprocStack() as stack:
        running = start_services(stack, stack.settings(tmp_path), reranker=observed)
        running.remember(content, ["bicycle", "Kyoto"])
        # The warm-up follows the reply, within the warmer's window (memory/warmup.py).
        give_up = time.monotonic() + WARM_WAIT_S
        while content not in warmed:
            assert time.monotonic() < give_up, "the write's text was never warmed"
            time.sleep(0.01)
        probe = running.client.call("reranker", "warm", {"passages": [content]})
        assert probe["cached"] == 0
        unseen = running.client.call("reranker", "warm", {"passages": ["never written here"]})
        assert unseen["cached"] == 1
