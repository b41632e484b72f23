"""The hop walk's order rules (services/graph/matching.py ``expand``), on a real graph file.

The walk groups its paths by memory in arrays and prices memories in the order of their best
bound, so nothing of its bookkeeping may leak into the answer: equal scores come back in the
order the walk reached them, and a memory reached at its best score twice keeps the first path.
"""

from __future__ import annotations

import time
from pathlib import Path

from keymem.services.graph import matching
from tests.graph_helpers import key_id_of, open_graph
from tests.vectors import remember_body

WORDS = ["harbor", "violin", "glacier", "pepper", "tunnel", "orchid"]


def test_equal_hops_keep_the_walks_order_and_each_memorys_first_path(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    try:
        permanent = {"decay_profile": "permanent"}  # freshness 1: equal bounds, equal scores
        seed = graph.remember(remember_body("The seed note", WORDS, **permanent))["saved"]
        # each the only other memory on one of the seed's keys, written in reverse
        for word in reversed(WORDS):
            graph.remember(remember_body(f"A note on the {word}", [word], **permanent))
        # one memory on both keys of another seed, naming them in the other order
        other = graph.remember(remember_body("Lantern and compass", ["lantern", "compass"]))
        both = graph.remember(
            remember_body("A compass by the lantern", ["compass", "lantern"], **permanent)
        )["saved"]
    finally:
        graph.close()
    graph = open_graph(tmp_path)  # loaded: the memories in the file's order, not the walk's
    try:
        state = graph.state
        reached_by = {key_id_of(graph, w): f"A note on the {w}" for w in WORDS}
        walk_order = [reached_by[key_id] for key_id in state.mem_links[seed]]
        body = {"seeds": {seed: 1.0}, "hops": 1}
        for per_hop in (3, len(WORDS)):
            rows = matching.expand(state, {**body, "per_hop": per_hop}, time.time())["memories"]
            assert len({row["score"] for row in rows}) == 1
            assert [state.memories[r["memory_id"]].content for r in rows] == walk_order[:per_hop]
        walk = {"seeds": {other["saved"]: 1.0}, "hops": 1}
        rows = matching.expand(state, walk, time.time())["memories"]
        assert [(row["memory_id"], row["via"]) for row in rows] == [
            (both, next(iter(state.mem_links[other["saved"]])))
        ]
    finally:
        graph.close()
