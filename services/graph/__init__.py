"""The graph service: sole owner of the DuckDB file and of the key/memory graph in memory.

``build(settings)`` is what the catalog calls; the methods and their contracts are in
docs/GRAPH.md. It stays one worker (invariant 1: one writer).
"""

from __future__ import annotations

from keymem.services.graph.service import GraphService, build, make_service, preload

__all__ = ["GraphService", "build", "make_service", "preload"]
