"""The embedder and the reranker in one process, sharing one loaded model: a placement.

With the offline default the reranker scores by the cosine of the embedding model (USE-m), so
two processes held the same ~120 MB model twice. Here one supervised program builds both
services on one backend and serves each with its own ``Worker`` (a thread each, the same code
as everywhere: invariant 8); each registers with the router under its own name, and a
``kill -9`` of the process takes both down and supervisord brings both back. A backend is
safe to call from both threads: ``encode`` keeps no state between calls but the last few
query vectors (``RecentQueries``, under a lock), which spare the reranker embedding a
search's query again.
"""

from __future__ import annotations

import logging
import time

from keymem.protocol.worker import Service
from keymem.services.config import (
    RERANK,
    RERANK_MODEL,
    RERANK_MODEL_PATH,
    SHARED_MODEL,
    Config,
    Settings,
)

log = logging.getLogger("keymem.models")

PROGRAM = "models"
SERVICES = ("embedder", "reranker")


def applies(config: Config) -> bool:
    """Whether this placement is used: asked for, and the reranker scores with the embedding
    model (no cross-encoder configured, reranking on), so there is one model to share.

    Read from the settings themselves: the launcher decides, and importing the services'
    packages (numpy and the rest) would slow every ``keymem`` command down.
    """
    cross_encoder = config[RERANK_MODEL] is not None or config[RERANK_MODEL_PATH] is not None
    return config[SHARED_MODEL] and config[RERANK] and not cross_encoder


def build(settings: Settings) -> list[Service]:
    """The embedder and the reranker, on one model loaded now."""
    from keymem.services import embedder, reranker
    from keymem.services.embedder.backends import load_backend
    from keymem.services.embedder.settings import EmbedderSettings
    from keymem.services.reranker.scorers import RecentQueries

    started = time.perf_counter()
    # the reranker reads a search's query vector the embedder made (``RecentQueries``)
    backend = RecentQueries(
        load_backend(EmbedderSettings.from_config(settings.config), settings.home)
    )
    log.info("shared model loaded in %.2f s", time.perf_counter() - started)
    return [embedder.build(settings, backend=backend), reranker.build(settings, backend=backend)]
