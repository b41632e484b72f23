"""Property tests: whatever agents do, link weights stay in [0.1, 3.0] and depth in [0, 1].

Hypothesis drives random sequences of the operations that move weights and depth (reads
through a key, dismissals, confirmations, corrections with inherited links) against one real
graph file per example, then checks every link and memory, in memory and after a reopen.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keymem.services.graph import GraphService
from keymem.services.graph.state import DEPTH_MAX, DEPTH_MIN, LINK_WEIGHT_MAX, LINK_WEIGHT_MIN
from tests.graph_helpers import open_graph
from tests.vectors import remember_body

KEYS = ["alpha", "beta", "gamma", "delta"]
OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["read", "dismiss", "confirm", "correct"]),
        st.integers(min_value=0, max_value=3),  # which memory (by creation order, current head)
        st.integers(min_value=0, max_value=3),  # which key
        st.integers(min_value=1, max_value=12),  # how many times
    ),
    min_size=1,
    max_size=12,
)


def _check_bounds(graph: GraphService) -> None:
    for links in graph.state.key_links.values():
        for link in links.values():
            assert LINK_WEIGHT_MIN <= link.weight <= LINK_WEIGHT_MAX, link
    for memory in graph.state.memories.values():
        assert DEPTH_MIN <= memory.depth <= DEPTH_MAX, memory


def _head(graph: GraphService, memory_id: str) -> str:
    while (nxt := graph.state.memories[memory_id].superseded_by) is not None:
        memory_id = nxt
    return memory_id


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(operations=OPERATIONS)
def test_weights_and_depth_stay_in_bounds(operations: list[tuple[str, int, int, int]]) -> None:
    home = Path(tempfile.mkdtemp(prefix="km-bounds-"))
    graph = open_graph(home)
    try:
        roots = [
            graph.remember(remember_body(f"memory number {i}", KEYS[: 2 + i % 3]))["saved"]
            for i in range(4)
        ]
        turn = 0
        for op, which, key_index, times in operations:
            memory_id = _head(graph, roots[which])
            linked = list(graph.state.mem_links[memory_id])
            key_id = linked[key_index % len(linked)]
            for _ in range(times):
                turn += 1
                if op == "read":
                    graph.read_memory({"memory_id": memory_id, "via_key_id": key_id})
                elif op == "dismiss":
                    graph.dismiss({"memory_id": memory_id, "key_id": key_id})
                elif op == "confirm":
                    graph.confirm_memory(
                        {"memory_id": memory_id, "evidence": "user", "confirmation_id": str(turn)}
                    )
                else:
                    memory_id = graph.correct(
                        {"memory_id": memory_id, "content": f"corrected {turn}"}
                    )["new_id"]
                    key_id = next(iter(graph.state.mem_links[memory_id]))
            _check_bounds(graph)
        graph.close()
        graph = open_graph(home)
        _check_bounds(graph)
    finally:
        graph.close()
        shutil.rmtree(home, ignore_errors=True)
