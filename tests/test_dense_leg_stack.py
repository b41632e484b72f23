"""The dense leg as deployed: real models, the memory service's idle-time pass, a graph
process killed between a write and its vector."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import psutil

from keymem.protocol.client import Client
from keymem.protocol.worker import HeartbeatPolicy
from keymem.services.evaluation.loader import wait_for_vectors
from keymem.services.memory.warmup import Warmer
from keymem.services.router.process import ORCHESTRATION_LIVENESS
from keymem.services.stack import InprocStack
from tests.full_stack import full_stack, shared_embedder, shared_reranker
from tests.test_graph_durability import _start_graph, _wait_ready, router  # noqa: F401
from tests.vectors import remember_body, vector

CAMPING = "Melanie took her kids camping in the mountains."
POTTERY = "Caroline signed up for a pottery class downtown."
# Korean, sharing no word and no script with the store: "went camping with the children"
CAMPING_KO = "아이들과 함께 산으로 캠핑을 갔다"


def test_a_question_in_another_script_finds_the_memory_through_the_leg(
    tmp_path: Path,
) -> None:
    """Written through the memory service, vectorised in its idle time, found by a Korean
    question that shares no word and no key with it; a memory written straight to the graph
    (no memory service to announce it) is vectorised by the background pass and found too."""
    with full_stack(tmp_path) as keymem:
        keymem.remember(POTTERY, ["pottery class"])
        keymem.remember(CAMPING, ["camping trip"])
        fingerprint = keymem.client.call("embedder", "info", {})["fingerprint"]
        keymem.client.call(
            "graph",
            "remember",
            remember_body(
                "Jon opened a dance studio in the old bakery.",
                ["dance studio"],
                fingerprint=fingerprint,
            ),
        )
        wait_for_vectors(keymem.client)  # the written ones at once, the other within a poll
        found = keymem.search(CAMPING_KO, top_k=1, timing=True)["memories"]
        assert [m["content"] for m in found] == [CAMPING]
        studio = keymem.search("댄스 교습소를 연 사람", top_k=1)["memories"]
        assert [m["content"] for m in studio] == ["Jon opened a dance studio in the old bakery."]


def test_a_kill_9_between_a_write_and_its_vector_loses_neither(
    router: InprocStack,  # noqa: F811
    short_home: Path,
) -> None:
    """The write is acknowledged, the graph is killed before any vector is made: after the
    restart the memory is there and waiting, the idle-time pass makes its vector, and a
    second kill right after that keeps the vector too."""
    client = router.client(timeout_ms=5_000)
    # a model call outlasts the fast heartbeat on a loaded box: the memory service's liveness
    router.add_worker(shared_reranker(), heartbeat=HeartbeatPolicy(100, ORCHESTRATION_LIVENESS))
    graph = _start_graph(short_home)
    warmer: Warmer | None = None
    try:
        _wait_ready(client, graph)
        saved = client.call(
            "graph",
            "remember",
            remember_body(CAMPING, ["camping"], fingerprint=shared_embedder().fingerprint),
        )["saved"]
        kill_9(graph)
        graph = _start_graph(short_home)
        _wait_ready(client, graph)
        backlog = client.call("graph", "vector_backlog", {"limit": 5})
        assert [m["memory_id"] for m in backlog["memories"]] == [saved]
        warmer = Warmer(router.endpoints.frontend, window_s=0.0, poll_s=0.1)
        warmer.start()
        wait_for_vectors(client)
        warmer.close()
        kill_9(graph)
        graph = _start_graph(short_home)
        _wait_ready(client, graph)
        assert client.call("graph", "vector_backlog", {})["missing"] == 0
        assert proposed(client) == [saved]
    finally:
        if warmer is not None:
            warmer.close()
        if graph.poll() is None:
            graph.terminate()
            graph.wait(10)


def kill_9(graph: subprocess.Popen[bytes]) -> None:
    """SIGKILL the graph service and wait until its forked worker, which notices its parent
    is gone and closes the file, has exited too."""
    workers = psutil.Process(graph.pid).children(recursive=True)
    graph.send_signal(signal.SIGKILL)
    graph.wait(10)
    psutil.wait_procs(workers, timeout=10)


def proposed(client: Client) -> list[str]:
    """What the graph proposes for the Korean question: only the leg can reach it."""
    body = {"vector": vector(CAMPING_KO), "text": CAMPING_KO, "hops": 0, "bm25": []}
    found = client.call("graph", "recall_candidates", body)["candidates"]
    return [c["memory_id"] for c in found if c["components"]["dense_rank"] is not None]
