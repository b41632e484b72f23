"""The hook's round trip for prompts the deployment has never seen, before and after a restart.

    python -m benchmarks.cold_prompt --store /tmp/km-scale5-v8/store-100000 [--prompts 30]

One deployment of ``--store`` (a directory with ``graph.duckdb`` and ``build.json``, copied into
a fresh home as ``benchmarks.scale_1m`` does; at 1M run it under ``flock /tmp/km1m.lock``), the
hook spawned as a host spawns it (``benchmarks.hook_overhead``'s probe), once per prompt, in
three phases over the same ``--prompts`` never-searched prompts of the store's stream:

- ``cold``: the first start; no pool of these prompts was ever scored (the synthetic stores were
  written straight into the graph file, so no memory was warmed at write time);
- ``after_restart``: ``keymem down`` and ``up``, then the same prompts: every process starts
  with empty in-memory caches, as the first prompts of a session after a restart do; what the
  reranker scored before the restart is all it could have kept;
- ``repeat``: the same prompts again, every cache warm: the floor;
- ``after_second_restart``: ``down``, ``up`` and the same prompts once more. A first start
  pools somewhat other memories than later starts (2,400 of 7,700 passages at 100k were new
  after the first restart), so this phase is the one whose pools were all scored before: as
  every pool of a store whose memories were warmed when written.

Each phase reports the hook's wall time (spawn to exit) and its ``inject`` p50/p95, the models
process's CPU per prompt (the embedder and reranker process: the model's time), the
deployment's RSS after it, and the passage store's size on disk.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks.deployment import BenchHome, bench_home
from benchmarks.footprint import deployment_processes, memory_mb
from benchmarks.graph_bench import Synthetic
from benchmarks.hook_overhead import PROJECT_DIR, host_payload, probe_run
from benchmarks.recall_bench import LIVENESS
from benchmarks.scale_1m import _pct, lexicon_serving
from benchmarks.scale_store import BUILD_REPORT
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.store.database import graph_path

UP_TIMEOUT_S = "900"
# services/reranker/service.py's PASSAGES_DIR, named here to run on commits before it
PASSAGES_DIR = Path("cache") / "passages"
PROMPT_SEED = 20261202  # a stream the store's build and scale_1m's queries did not draw


def _models_process(deployment: BenchHome) -> psutil.Process:
    """The process that holds the reranker (``models`` when it shares the embedder's model)."""
    for process in deployment_processes(deployment):
        if any(name in " ".join(process.cmdline()) for name in ("models", "reranker")):
            return process
    raise RuntimeError("no models or reranker process in the deployment")


def _cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def phase(deployment: BenchHome, prompts: list[dict[str, Any]]) -> dict[str, Any]:
    """Every prompt once through a spawned hook."""
    models = _models_process(deployment)
    cpu_before = _cpu_s(models)
    wall_ms, inject_ms, answered = [], [], 0
    for prompt in prompts:
        (deployment.home / "namespaces.json").write_text(
            json.dumps({PROJECT_DIR: prompt["namespace"]})
        )
        spawned_at, exited_at, marks, printed = probe_run(
            deployment.env, host_payload(prompt["query"])
        )
        wall_ms.append((exited_at - spawned_at) * 1000)
        inject_ms.append((marks["inject_end"] - marks["inject_start"]) * 1000)
        answered += bool(printed.strip())
    return {
        "hook_p50_ms": round(statistics.median(wall_ms), 1),
        "hook_p95_ms": _pct(wall_ms, 95),
        "inject_p50_ms": round(statistics.median(inject_ms), 1),
        "inject_p95_ms": _pct(inject_ms, 95),
        "models_cpu_ms_per_prompt": round((_cpu_s(models) - cpu_before) * 1000 / len(prompts), 1),
        "answered": answered,
        "rss_total_mb": memory_mb(deployment)["rss_total_mb"],
        "models_rss_mb": round(models.memory_info().rss / 2**20, 1),
        "passage_store_mb": round(
            sum(
                p.stat().st_size for p in (deployment.home / PASSAGES_DIR).rglob("*") if p.is_file()
            )
            / 2**20,
            1,
        )
        if (deployment.home / PASSAGES_DIR).exists()
        else 0.0,
        "load_average": round(os.getloadavg()[0], 1),
    }


def _up(deployment: BenchHome, memories: int) -> float:
    started = time.perf_counter()
    deployment.keymem("up", "--timeout", UP_TIMEOUT_S)
    up_s = time.perf_counter() - started
    with Client(ipc_endpoints(deployment.home).frontend) as client:
        lexicon_serving(client, memories)
    return round(up_s, 2)


def measure(store: Path, prompts: int) -> dict[str, Any]:
    built = json.loads((store / BUILD_REPORT).read_text())
    data = Synthetic(built["memories"], seed=PROMPT_SEED)
    asked = []
    for _ in range(prompts):
        q = data.query()
        asked.append({"query": q["text"], "namespace": q["namespace"]})
    report: dict[str, Any] = {"store": str(store), "memories": built["memories"]}
    with bench_home("km-cp-") as deployment:
        deployment.env["KEYMEM_HEARTBEAT_LIVENESS"] = LIVENESS
        shutil.copy(store / "graph.duckdb", graph_path(deployment.home))
        report["first_up_s"] = _up(deployment, built["memories"])
        report["cold"] = phase(deployment, asked)
        deployment.keymem("down")
        report["up_s"] = _up(deployment, built["memories"])
        report["after_restart"] = phase(deployment, asked)
        report["repeat"] = phase(deployment, asked)
        deployment.keymem("down")
        report["second_up_s"] = _up(deployment, built["memories"])
        report["after_second_restart"] = phase(deployment, asked)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--prompts", type=int, default=30)
    args = parser.parse_args()
    json.dump(measure(args.store, args.prompts), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
