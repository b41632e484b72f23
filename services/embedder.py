"""The embedder service: turns keys and queries into vectors.

Stateless (invariant 3): any number of workers may run. Its model backends arrive with the
embedder issue; until then it answers the built-in ``ping`` and ``stats``.
"""

from __future__ import annotations

from protocol.worker import Service
from services.config import Settings


def build(settings: Settings) -> Service:
    return Service("embedder")
