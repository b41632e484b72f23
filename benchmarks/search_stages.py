"""Where a hybrid search's time goes, stage by stage, on a real deployment of a large store.

    python -m benchmarks.search_stages --store /tmp/km-scale5/store-10000/graph.duckdb
    python -m benchmarks.search_stages --home /tmp/km1m/home --memories 1000000 [--seconds 20]

``--store`` starts a fresh deployment on a copy of a store file (its lexicon indexes every
memory from the change feed first); ``--home`` copies a whole KEYMEM_HOME whose lexicon has
indexed its store already (its cache saved) and starts that. Either way it waits until the
lexicon serves every memory, searches each query of ``benchmarks.scale_1m`` once (warm), then
measures through the router, one closed-loop client:

- ``search``: `memory.search` (rerank on, ``timing: true``) round trip and the stages it reports;
- ``stages``: each service call a search makes, one after another with the bodies a search
  sends (the query's embedding, the lexicon's BM25 top 50, the phrase extraction, the phrases'
  embedding, the graph's `recall_candidates`, the reranker's score of the pool), and a `ping`
  of a worker through the router (what any call costs before its handler runs);
- the load average before and after.

Run it nice'd, one 1M deployment at a time (``flock /tmp/km1m.lock``): the box is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.deployment import bench_home
from benchmarks.graph_bench import Synthetic
from benchmarks.recall_bench import LIVENESS, _queries, _search_loop
from benchmarks.scale_1m import UP_TIMEOUT_S, WARM_TIMEOUT_MS, lexicon_serving
from benchmarks.scale_store import BUILD_REPORT
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.protocol.limits import POOL_DEFAULT, RERANK_MAX_PASSAGES
from keymem.services.graph.matching import PHRASES_MAX
from keymem.services.memory.search import BM25_DEPTH
from keymem.store.database import graph_path

CALL_TIMEOUT_MS = 10_000


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 3)


def _timed(client: Client, service: str, method: str, body: Any, out: list[float]) -> Any:
    started = time.perf_counter()
    result = client.call(service, method, body, timeout_ms=CALL_TIMEOUT_MS)
    out.append((time.perf_counter() - started) * 1000)
    return result


def stage_calls(client: Client, queries: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """Each service call of a search on its own, in the order a search makes them."""
    samples: dict[str, list[float]] = {}

    def timed(stage: str, service: str, method: str, body: Any) -> Any:
        return _timed(client, service, method, body, samples.setdefault(stage, []))

    end = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < end:
        query, namespace = (
            queries[i % len(queries)]["query"],
            queries[i % len(queries)]["namespace"],
        )
        timed("ping", "graph", "ping", None)
        vector = timed("embed_query", "embedder", "embed", {"texts": [query], "kind": "query"})
        body = {"query": query, "namespace": namespace, "top_n": BM25_DEPTH}
        bm25 = timed("lexicon_search", "lexicon", "search", body)
        body = {"text": query, "limit": PHRASES_MAX, "content_words": True}
        phrases = [c["key"] for c in timed("extract_keys", "lexicon", "extract_keys", body)["keys"]]
        graph_body: dict[str, Any] = {
            "namespace": namespace,
            "text": query,
            "bm25": bm25["hits"],
            "hops": 2,
            "pool": POOL_DEFAULT,
            "vector": vector["vectors"][0],
        }
        if phrases:
            embedded = timed(
                "embed_phrases", "embedder", "embed", {"texts": phrases, "kind": "key"}
            )
            graph_body["phrase_vectors"] = embedded["vectors"]
        pool = timed("graph", "graph", "recall_candidates", graph_body)["candidates"]
        if pool:
            passages = [c["content"] for c in pool][:RERANK_MAX_PASSAGES]
            timed("rerank", "reranker", "score", {"query": query, "passages": passages})
        i += 1
    return {
        "n": i,
        **{s: {"p50_ms": _pct(v, 50), "p99_ms": _pct(v, 99)} for s, v in samples.items()},
    }


def measure(
    home_template: Path | None, store: Path | None, memories: int, seconds: float
) -> dict[str, Any]:
    with bench_home("km-ss-") as deployment:
        deployment.env["KEYMEM_HEARTBEAT_LIVENESS"] = LIVENESS
        if home_template is not None:
            shutil.rmtree(deployment.home)
            shutil.copytree(home_template, deployment.home, symlinks=True)
        else:
            assert store is not None
            shutil.copy(store, graph_path(deployment.home))
        report: dict[str, Any] = {"memories": memories}
        report["load_average_start"] = [round(x, 1) for x in os.getloadavg()]
        deployment.keymem("up", "--timeout", UP_TIMEOUT_S)
        with Client(ipc_endpoints(deployment.home).frontend) as client:
            report["lexicon_ready_s"] = round(lexicon_serving(client, memories), 1)
            queries = _queries(Synthetic(memories, seed=memories))
            for query in queries:  # each query's pool once, as scale_1m does
                client.call("memory", "search", query, timeout_ms=WARM_TIMEOUT_MS)
            report["search"] = _search_loop(client, queries, seconds, rerank=True)
            report["stages"] = stage_calls(client, queries, seconds)
            report["search_again"] = _search_loop(client, queries, seconds, rerank=True)
        report["load_average"] = [round(x, 1) for x in os.getloadavg()]
        return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--store", type=Path, help="a graph.duckdb to copy (build.json beside it)")
    source.add_argument("--home", type=Path, help="a KEYMEM_HOME to copy, lexicon indexed")
    parser.add_argument("--memories", type=int, help="the store's memories (else build.json)")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    memories = args.memories
    if memories is None:
        if args.store is None:
            parser.error("--home needs --memories")
        memories = int(json.loads((args.store.parent / BUILD_REPORT).read_text())["memories"])
    print(json.dumps(measure(args.home, args.store, memories, args.seconds), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
