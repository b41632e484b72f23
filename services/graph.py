"""The graph service: sole owner of the DuckDB file and of the key/memory graph in memory.

Its store arrives with the graph issue; until then it answers the built-in ``ping`` and
``stats``. It stays one worker (invariant 1: one writer).
"""

from __future__ import annotations

from protocol.worker import Service
from services.config import Settings


def build(settings: Settings) -> Service:
    return Service("graph")
