"""Recall, inject and hook figures for docs/BENCHMARKS.md at a given store size.

    python -m benchmarks.recall_bench --memories 10000 [--seconds 10] [--hook-runs 40]

Builds a synthetic store (benchmarks.graph_bench.Synthetic: 3-6 Zipf-shared keys per memory,
4 namespaces) straight into a temporary home's graph file, then starts the real deployment
(`keymem up`: supervisord and the five processes; its model check re-embeds every key with the
default embedder, so key vectors are real), waits until the lexicon has indexed every memory,
and measures through the router, in the same run:

- hybrid recall (`memory.search`, hops 2, rerank on) from one closed-loop client: p50/p99 of
  the round trip and of each stage (analyse = embedder ∥ lexicon, graph, rerank);
- the same with rerank off;
- inject (`memory.inject`) from one closed-loop client, on the project namespace alone and on
  the project namespace plus `default`, as the hook asks when the working directory maps to a
  project;
- the hook as a host runs it: spawn `keymem-hook`'s module, feed host JSON whose `cwd` maps to
  the project namespace (`namespaces.json`), read stdout — p50/p95 — next to the floor
  `python -c "import zmq, msgpack"` measured the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.deployment import bench_home
from benchmarks.graph_bench import Synthetic, build
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.protocol.errors import DeadlineExceeded

INDEX_WAIT_S = 1_800
QUERY_POOL = 200
HOOK_MODULE = "keymem.hooks.prompt_submit"
PROJECT_DIR = "/tmp/km-bench-project"
LIVENESS = "30"  # heartbeat intervals  # the hook's cwd, mapped to the project namespace


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 3)


def _queries(data: Synthetic) -> list[dict[str, Any]]:
    out = []
    for _ in range(QUERY_POOL):
        q = data.query()
        out.append({"query": q["text"], "namespace": q["namespace"]})
    return out


def _wait_indexed(client: Client, memories: int) -> float:
    started = time.monotonic()
    while time.monotonic() - started < INDEX_WAIT_S:
        try:
            stats = client.call("lexicon", "index_stats", {}, timeout_ms=5_000)
        except DeadlineExceeded:  # a lexicon busy indexing a large store answers late: ask again
            continue
        if stats["documents"] >= memories:
            return time.monotonic() - started
        time.sleep(1.0)
    raise TimeoutError("the lexicon did not index every memory in time")


def _search_loop(
    client: Client,
    queries: list[dict[str, Any]],
    seconds: float,
    rerank: bool,
) -> dict[str, Any]:
    totals: list[float] = []
    stages: dict[str, list[float]] = {}
    end = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < end:
        body = {**queries[i % len(queries)], "timing": True, "rerank": rerank, "top_k": 10}
        started = time.perf_counter()
        reply = client.call("memory", "search", body, timeout_ms=10_000)
        totals.append((time.perf_counter() - started) * 1000)
        for stage, ms in reply["timing_ms"].items():
            stages.setdefault(stage, []).append(ms)
        i += 1
    return {
        "n": len(totals),
        "round_trip": {"p50_ms": _pct(totals, 50), "p99_ms": _pct(totals, 99)},
        "stages": {s: {"p50_ms": _pct(v, 50), "p99_ms": _pct(v, 99)} for s, v in stages.items()},
    }


def _spawn_times(argv: list[str], stdin: bytes, env: dict[str, str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, input=stdin, capture_output=True, env=env, timeout=30, check=True)
        times.append((time.perf_counter() - started) * 1000)
    return times


def _inject_loop(
    client: Client, queries: list[dict[str, Any]], extra: list[str], seconds: float
) -> dict[str, Any]:
    """Closed-loop inject of each query in its namespace plus ``extra`` ones."""
    totals: list[float] = []
    end = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < end:
        query = queries[i % len(queries)]
        body = {"prompt": query["query"], "namespaces": [query["namespace"], *extra]}
        started = time.perf_counter()
        client.call("memory", "inject", body, timeout_ms=10_000)
        totals.append((time.perf_counter() - started) * 1000)
        i += 1
    return {"n": len(totals), "p50_ms": _pct(totals, 50), "p99_ms": _pct(totals, 99)}


def _hook(
    home: Path, env: dict[str, str], queries: list[dict[str, Any]], runs: int
) -> dict[str, Any]:
    """The hook for a prompt of the project namespace, its cwd mapped to that namespace."""
    prompt = queries[0]
    (home / "namespaces.json").write_text(json.dumps({PROJECT_DIR: prompt["namespace"]}))
    payload = json.dumps(
        {
            "session_id": "bench",
            "cwd": PROJECT_DIR,
            "hook_event_name": "UserPromptSubmit",
            "prompt": prompt["query"],
        }
    ).encode()
    hook = _spawn_times([sys.executable, "-m", HOOK_MODULE], payload, env, runs)
    floor = _spawn_times([sys.executable, "-c", "import zmq, msgpack"], b"", env, runs)
    return {
        "runs": runs,
        "namespaces": [prompt["namespace"], "default"],
        "hook": {"p50_ms": _pct(hook, 50), "p95_ms": _pct(hook, 95)},
        "floor_import_zmq_msgpack": {"p50_ms": _pct(floor, 50), "p95_ms": _pct(floor, 95)},
    }


def measure(memories: int, seconds: float, hook_runs: int) -> dict[str, Any]:
    data = Synthetic(memories)
    with bench_home("km-rb-") as deployment:
        # the start-up model check re-embeds every key in 256-key calls, which on a loaded box
        # can outlast the default heartbeat window; the measurement does not depend on it
        deployment.env["KEYMEM_HEARTBEAT_LIVENESS"] = LIVENESS
        built = build(deployment.home, data, memories)
        started = time.perf_counter()
        deployment.keymem("up", "--timeout", "600")
        up_s = time.perf_counter() - started
        with Client(ipc_endpoints(deployment.home).frontend) as client:
            index_s = _wait_indexed(client, built["memories"])
            queries = _queries(data)
            # warm caches: every query's pool once, as memories written through the router
            # are warmed on write (this store was written straight into the graph file)
            for query in queries:
                client.call("memory", "search", query, timeout_ms=10_000)
            rerank_on = _search_loop(client, queries, seconds, rerank=True)
            rerank_off = _search_loop(client, queries, seconds / 2, rerank=False)
            inject_one = _inject_loop(client, queries, [], seconds)
            inject_two = _inject_loop(client, queries, ["default"], seconds)
        hook = _hook(deployment.home, deployment.env, queries, hook_runs)
        return {
            "store": built,
            "up_with_migration_s": round(up_s, 1),
            "lexicon_index_wait_s": round(index_s, 1),
            "search_rerank_on": rerank_on,
            "search_rerank_off": rerank_off,
            "inject_one_namespace": inject_one,
            "inject_project_and_default": inject_two,
            "hook_round_trip": hook,
            "load_average": os.getloadavg(),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--hook-runs", type=int, default=40)
    args = parser.parse_args()
    report = measure(args.memories, args.seconds, args.hook_runs)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
