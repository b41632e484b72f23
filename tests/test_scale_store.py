"""The scaling benchmark's store: written through ``keymem import``, it must hold what the
graph's own ``remember_batch`` writes for the same stream, or the 1M figures measure another
store than a user's."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks.graph_bench import Synthetic
from benchmarks.scale_store import ExportChunks, keymem_import
from keymem.services.graph import GraphService
from keymem.store.database import graph_path

MEMORIES = 400
CHUNK = 150  # the later files link keys an earlier file wrote
FINGERPRINT = "usem3:test"


def _contents(graph: GraphService) -> tuple[dict[str, Any], set[tuple[str, str, tuple[str, ...]]]]:
    """Counts per namespace and each memory's (namespace, content, key concepts)."""
    state = graph.state
    memories = {
        (
            m.namespace,
            m.content,
            tuple(sorted(state.keys[k].concept for k in state.mem_links[m.id])),
        )
        for m in state.memories.values()
    }
    return graph.counts({})["namespaces"], memories


@pytest.mark.slow  # three keymem processes: minutes on the loaded box
def test_the_imported_store_holds_what_remember_batch_writes(tmp_path: Path) -> None:
    imported, remembered = tmp_path / "imported", tmp_path / "remembered"
    imported.mkdir()
    chunks = ExportChunks(Synthetic(MEMORIES), FINGERPRINT, time.time())
    for start in range(0, MEMORIES, CHUNK):
        keymem_import(imported, chunks.next(min(CHUNK, MEMORIES - start)), tmp_path)
    graph = GraphService(graph_path(remembered))
    data = Synthetic(MEMORIES)
    for start in range(0, MEMORIES, CHUNK):
        graph.remember_batch({"items": [data.item() for _ in range(min(CHUNK, MEMORIES - start))]})
    expected = _contents(graph)
    graph.close()

    graph = GraphService(graph_path(imported))
    try:
        assert graph.quarantined == []
        assert graph.state.fingerprint == FINGERPRINT  # keymem up will not re-embed it
        assert _contents(graph) == expected
    finally:
        graph.close()
