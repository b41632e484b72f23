"""What the graph worker's start-up costs on a built store: CPU and memory by phase.

    env NUMPY_MADVISE_HUGEPAGE=0 python -m benchmarks.graph_load \
        --store /tmp/km-scale/store-100000 [--trace 20] [--json]

The variable is the graph program's environment (services/catalog.py); numpy reads it at
import, so it is set on the command line (``costs`` sets it). In a fresh process (so its RSS
is the graph's alone) it copies the store's graph file and starts the graph as the service
does (``GraphService._load_state``: the cyclic GC paused, then ``store.load``,
``rows.quarantine``, ``GraphState``), timing each phase in CPU seconds (load inflates CPU time
less than wall time), counting its minor page faults (the fresh pages it touches: on a virtual
machine one costs 1 to 30 us of system time depending on the host's hour, so the count is the
figure that compares across runs) and reading the RSS after each, the peak RSS, and the RSS
once the loaded rows are dropped and the C heap trimmed (what the worker then holds).
``--trace N`` runs it again under tracemalloc and lists the N source lines that hold the most
memory after the load (the traced run is several times slower; its times are not comparable).

``--key-ann DIR`` then gives the namespaces at or above ``KEYMEM_KEY_ANN_MIN_KEYS`` concept keys
their approximate indexes as the service does (loaded from DIR, or built and saved there the
first time: minutes at 1M) and reads the RSS with them serving next to the float32 matrices
(``rss_served_mb``) and once the matrices are halved (``rss_halved_mb``: what the worker
holds). Between the two it times ``nearest_concepts`` through the index on ``--queries``
vectors (mixes of two keys' vectors, one BLAS thread as the service), its candidates scored
from the float32 matrix (``nearest_held_ms``), then from the float16 one
(``nearest_halved_ms``), and reports how far the two agree (``_agreement``).

``costs(store)`` returns the same figures for another benchmark (``scale_1m --costs``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from threadpoolctl import threadpool_limits

from keymem.services import config as cfg
from keymem.services.catalog import PROGRAM_ENVIRONMENT
from keymem.services.graph import keyann, rows
from keymem.services.graph.state import GraphState
from keymem.store.database import GraphStore, graph_path, trim_heap

HUB_MIN_LINKS = 50
MB = 1 << 20
NEAREST_TAKE = 40  # match_keys asks top_k * 4 nearest concept keys
QUERIES = 300
QUERY_SEED = 5
READY_POLL_S = 0.5


def _rss_mb() -> float:
    return round(psutil.Process().memory_info().rss / MB, 1)


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # kB on Linux


def _queries(state: GraphState, count: int) -> dict[str, np.ndarray]:
    """Per served namespace, ``count`` unit vectors each halfway between two random keys."""
    rng = np.random.default_rng(QUERY_SEED)
    out = {}
    for namespace, index in state.indexes.items():
        if index.approximate is None or index.halved:
            continue
        n = len(index)
        mixed = index.matrix[rng.integers(0, n, count)] + index.matrix[rng.integers(0, n, count)]
        out[namespace] = (mixed / np.linalg.norm(mixed, axis=1, keepdims=True)).astype(np.float32)
    return out


def _nearest(
    state: GraphState, queries: dict[str, np.ndarray]
) -> tuple[float, list[dict[str, float]]]:
    """CPU ms per query vector of ``nearest_concepts``; per query the keys found, in order,
    with their cosines."""
    found: list[dict[str, float]] = []
    started = time.process_time()
    with threadpool_limits(1):
        for namespace, vectors in queries.items():
            index = state.indexes[namespace]
            for vector in vectors:
                (nearest,) = index.nearest_concepts(vector[None, :], NEAREST_TAKE)
                rows, cosines = nearest.rows.tolist(), nearest.cosines.tolist()
                found.append({index.ids[r]: c for r, c in zip(rows, cosines, strict=True)})
    spent = time.process_time() - started
    return round(spent / max(1, len(found)) * 1e3, 3), found


def _agreement(before: list[dict[str, float]], after: list[dict[str, float]]) -> dict[str, Any]:
    """How the index's half-precision cosines rank against the float32 re-score, per query:
    the same top 10 (as a set), the share of the top ``NEAREST_TAKE`` both hold, and the
    largest cosine difference of a key both found."""
    pairs = list(zip(before, after, strict=True))
    return {
        "nearest_same_top10": round(
            float(np.mean([set(list(b)[:10]) == set(list(a)[:10]) for b, a in pairs])), 4
        ),
        "nearest_overlap": round(
            float(np.mean([len(b.keys() & a.keys()) / max(1, len(b)) for b, a in pairs])), 4
        ),
        "nearest_max_cosine_error": max(
            (abs(b[k] - a[k]) for b, a in pairs for k in b.keys() & a.keys()), default=0.0
        ),
    }


def serve_key_ann(state: GraphState, directory: Path, queries: int) -> dict[str, Any]:
    """The approximate indexes attached and ready, then the matrices halved (see above)."""
    out: dict[str, Any] = {}
    manager = keyann.KeyAnn(directory, cfg.KEY_ANN_MIN_KEYS.default)
    started = time.perf_counter()
    manager.tick(state.indexes, state.fingerprint)
    served = [i.approximate for i in state.indexes.values() if i.approximate is not None]
    while not all(a.ready() or a.failed for a in served):
        time.sleep(READY_POLL_S)
    out["key_ann_namespaces"] = sum(a.ready() for a in served)
    out["key_ann_ready_s"] = round(time.perf_counter() - started, 1)
    out["key_ann_usearch_mb"] = round(
        sum(a.keys.index.memory_usage for a in served if a.keys is not None) / MB, 1
    )
    trim_heap()
    out["rss_served_mb"] = _rss_mb()
    asked = _queries(state, queries)
    out["nearest_held_ms"], before = _nearest(state, asked)
    started = time.process_time()
    out["halved"] = state.halve_matrices()
    out["halve_cpu_s"] = round(time.process_time() - started, 3)
    trim_heap()
    out["rss_halved_mb"] = _rss_mb()
    out["nearest_halved_ms"], after = _nearest(state, asked)
    out.update(_agreement(before, after))
    return out


def measure(
    store: Path, trace: int = 0, key_ann: Path | None = None, queries: int = QUERIES
) -> dict[str, Any]:
    """Start the graph from a copy of ``store``'s file in this process; the figures by phase."""
    work = Path(tempfile.mkdtemp(prefix="km-graph-load-", dir="/tmp"))
    try:
        path = graph_path(work)
        shutil.copy(graph_path(store), path)
        out: dict[str, Any] = {"store": str(store), "rss_start_mb": _rss_mb()}
        if trace:
            tracemalloc.start()
        gc.disable()
        started, faults = time.process_time(), _faults()
        opened = GraphStore(path)
        loaded = opened.load()
        loaded_at, loaded_faults = time.process_time(), _faults()
        out["rss_loaded_mb"] = _rss_mb()
        quarantined = rows.quarantine(loaded)
        checked_at, checked_faults = time.process_time(), _faults()
        out["rss_checked_mb"] = _rss_mb()
        state = GraphState(loaded, HUB_MIN_LINKS)
        built_at, built_faults = time.process_time(), _faults()
        out["rss_state_mb"] = _rss_mb()
        del loaded
        trim_heap()
        gc.enable()
        gc.freeze()
        out.update(
            memories=len(state.memories),
            keys=len(state.keys),
            links=state.links.kinds()[0],
            quarantined=len(quarantined),
            load_cpu_s=round(loaded_at - started, 2),
            quarantine_cpu_s=round(checked_at - loaded_at, 2),
            state_cpu_s=round(built_at - checked_at, 2),
            total_cpu_s=round(built_at - started, 2),
            load_faults=loaded_faults - faults,
            quarantine_faults=checked_faults - loaded_faults,
            state_faults=built_faults - checked_faults,
            total_faults=built_faults - faults,
            rss_held_mb=_rss_mb(),
            rss_peak_mb=_peak_rss_mb(),
        )
        out["graph_mb"] = round(out["rss_held_mb"] - out["rss_start_mb"], 1)
        out["bytes_per_memory"] = round(out["graph_mb"] * MB / max(1, out["memories"]))
        if key_ann is not None:
            out.update(serve_key_ann(state, key_ann, queries))
        if trace:
            lines = tracemalloc.take_snapshot().statistics("lineno")
            out["traced_mb"] = round(sum(s.size for s in lines) / MB, 1)
            out["top_lines"] = [
                {"mb": round(s.size / MB, 1), "objects": s.count, "line": str(s.traceback)}
                for s in lines[:trace]
            ]
            tracemalloc.stop()
        opened.close()
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def costs(store: Path, trace: int = 0) -> dict[str, Any]:
    """``measure`` in a fresh interpreter (this one's heap would count in the RSS), with the
    environment the graph program runs with."""
    command = [sys.executable, "-m", "benchmarks.graph_load", "--store", str(store), "--json"]
    if trace:
        command += ["--trace", str(trace)]
    env = {**os.environ, **PROGRAM_ENVIRONMENT}
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    figures: dict[str, Any] = json.loads(done.stdout)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True, help="a KEYMEM_HOME with a graph")
    parser.add_argument("--trace", type=int, default=0, help="list the N heaviest lines")
    parser.add_argument("--key-ann", type=Path, help="saved approximate indexes (built if none)")
    parser.add_argument("--queries", type=int, default=QUERIES, help="per served namespace")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = measure(args.store, key_ann=args.key_ann, queries=args.queries)
    if args.trace:
        figures["traced"] = measure(args.store, trace=args.trace)
    if args.json:
        print(json.dumps(figures))
        return 0
    traced = figures.pop("traced", None)
    for name, value in figures.items():
        print(f"{name:>20}  {value}")
    if traced is not None:
        print(f"traced run: {traced['traced_mb']} MB traced after the load")
        for line in traced["top_lines"]:
            print(f"{line['mb']:>8} MB {line['objects']:>9}  {line['line']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
