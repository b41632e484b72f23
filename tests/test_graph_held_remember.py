"""A remember sent without vectors: the graph files it under the keys it holds, so the memory
service's write is one graph round trip (services/graph/service.py, ``_filed_by_text``: a held
key resolves by its text, no vector is fetched or read); a key it does not hold refuses the
write and names it, and the write sent again with that key's vector alone is filed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from keymem.protocol.errors import BadRequest, KeysUnheld
from tests.graph_helpers import key_id_of, open_graph
from tests.vectors import remember_body, vectors


def test_a_remember_under_held_keys_needs_no_vectors(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    try:
        graph.remember(remember_body("Ada wrote the first program", ["Ada", "program"]))
        ada, program = key_id_of(graph, "Ada"), key_id_of(graph, "program")
        saved = graph.remember({"content": "Ada annotated the engine", "keys": ["Ada", "program"]})
        assert set(graph.state.mem_links[saved["saved"]]) == {ada, program}
        assert len(graph.state.keys) == 2

        before = sorted(graph.state.memories)
        with pytest.raises(KeysUnheld, match="does not hold") as refused:
            graph.remember({"content": "Ada and the engine", "keys": ["Ada", "engine", "ada"]})
        assert refused.value.detail == {"unheld_keys": ["engine"]}  # "ada" repeats "Ada"
        assert sorted(graph.state.memories) == before  # nothing written
        assert graph.store.pending[-1].events[0][1] == saved["saved"]
        engine = vectors(["engine"])
        filed = graph.remember(
            {
                "content": "Ada and the engine",
                "keys": ["Ada", "engine"],
                "embedded_keys": ["engine"],
                "embedded_vectors": engine,
            }
        )
        assert set(graph.state.mem_links[filed["saved"]]) == {ada, key_id_of(graph, "engine")}
        assert np.allclose(
            graph.state.key_vector(graph.state.keys[key_id_of(graph, "engine")]),
            engine[0],
        )
        before = sorted(graph.state.memories)

        # the rest of the write is checked as with vectors: a typed error, nothing written
        for bad in ({"content": "", "keys": ["Ada"]}, {"content": "x", "keys": ["Ada", 3]}):
            with pytest.raises(BadRequest):
                graph.remember(bad)
        assert sorted(graph.state.memories) == before
        typed = graph.remember(
            {"content": "Ada Lovelace's notes", "keys": ["Ada"], "key_types": {"Ada": "name"}}
        )
        assert graph.state.keys[ada].key_type == "name"
        assert set(graph.state.mem_links[typed["saved"]]) >= {ada}
    finally:
        graph.close()
