"""The reranker service: scores (query, passage) pairs for the final recall order.

Stateless (invariant 3). Its backends arrive with the reranker issue; until then it answers
the built-in ``ping`` and ``stats``.
"""

from __future__ import annotations

from protocol.worker import Service
from services.config import Settings


def build(settings: Settings) -> Service:
    return Service("reranker")
