"""The scaling benchmark's store is bulk-loaded: it must hold what the graph's own
``remember_batch`` writes for the same stream, or the 1M figures measure another store than a
user's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.graph_bench import DIM, NAMESPACES, vocabulary_size
from benchmarks.scale_store import Stream, bulk_store, stream_items
from keymem.services.graph import GraphService
from keymem.store.database import graph_path

MEMORIES = 400
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


def test_the_bulk_store_holds_what_remember_batch_writes(tmp_path: Path) -> None:
    vocab = vocabulary_size(MEMORIES)
    raw = np.random.default_rng(0).standard_normal((NAMESPACES, vocab, DIM)).astype(np.float32)
    table = raw / np.linalg.norm(raw, axis=2, keepdims=True)
    bulk, remembered = tmp_path / "bulk", tmp_path / "remembered"
    bulk.mkdir()
    bulk_store(bulk, MEMORIES, table, FINGERPRINT)
    graph = GraphService(graph_path(remembered))
    items = stream_items(Stream(MEMORIES, vocab), table, 0)
    for start in range(0, MEMORIES, 200):
        graph.remember_batch({"items": items[start : start + 200]})
    expected = _contents(graph)
    graph.close()

    graph = GraphService(graph_path(bulk))
    try:
        assert graph.quarantined == []
        assert graph.state.fingerprint == FINGERPRINT  # keymem up will not re-embed it
        assert _contents(graph) == expected
        assert graph.counts({})["seq"] == MEMORIES  # a change-feed event for each memory
    finally:
        graph.close()
