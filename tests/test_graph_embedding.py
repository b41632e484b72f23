"""The embedding fingerprint and the staged re-embedding of every key (a model switch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from keymem.protocol.errors import Conflict, NotFound
from tests.graph_helpers import open_graph
from tests.vectors import FINGERPRINT, remember_body, vector, vectors


def test_fingerprint_is_recorded_and_a_mismatch_is_refused(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    try:
        assert graph.fingerprint({}) is None
        graph.remember(remember_body("first", ["first key"], fingerprint=FINGERPRINT))
        assert graph.fingerprint({}) == {"fingerprint": FINGERPRINT, "dim": 512}
        with pytest.raises(Conflict) as caught:
            graph.remember(remember_body("other space", ["x1"], fingerprint="openai:small"))
        assert caught.value.detail["fingerprint_mismatch"] is True
    finally:
        graph.close()


def test_reembed_replaces_every_key_vector_after_a_backup(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    try:
        graph.remember(remember_body("Eve plays chess", ["chess", "game"], fingerprint=FINGERPRINT))
        graph.remember(remember_body("Go is a board game", ["game", "board"]))
        token = graph.reembed_begin({"fingerprint": "test:flipped", "dim": 512})["token"]
        page = graph.reembed_keys({"limit": 2})
        with pytest.raises(Conflict):  # not every key has a new vector yet
            graph.reembed_commit({"token": token})
        rest = graph.reembed_keys({"after": page["next"]})
        concepts = {k["key_id"]: k["concept"] for k in page["keys"] + rest["keys"]}
        assert sorted(concepts.values()) == ["board", "chess", "game"]
        flipped = -vectors(list(concepts.values()))  # a different space, same dimension
        graph.reembed_put({"token": token, "key_ids": list(concepts), "vectors": flipped})
        with pytest.raises(NotFound):
            graph.reembed_commit({"token": "wrong"})
        done = graph.reembed_commit({"token": token})
        assert done["replaced"] == 3 and Path(done["backup"]).exists()
        assert graph.fingerprint({}) == {"fingerprint": "test:flipped", "dim": 512}
        # matching now works in the new space only
        hit = graph.match_keys({"vector": -vector("chess")})["keys"][0]
        assert hit["concept"] == "chess" and hit["cosine"] > 0.99
        assert graph.match_keys({"vector": vector("chess"), "min_cosine": 0.5})["keys"] == []
    finally:
        graph.close()
    reopened = open_graph(tmp_path)
    try:
        key = next(k for k in reopened.state.keys.values() if k.concept == "chess")
        assert np.allclose(key.vector, -vector("chess"), atol=1e-6)
    finally:
        reopened.close()
