"""Which module builds which worker service: the one place that names them all."""

from __future__ import annotations

from collections.abc import Callable

from keymem.protocol.worker import Service
from keymem.services import embedder, graph, lexicon, reranker
from keymem.services.config import WORKER_SERVICES, Settings

BUILDERS: dict[str, Callable[[Settings], Service]] = {
    "embedder": embedder.build,
    "reranker": reranker.build,
    "lexicon": lexicon.build,
    "graph": graph.build,
}
assert tuple(BUILDERS) == WORKER_SERVICES
