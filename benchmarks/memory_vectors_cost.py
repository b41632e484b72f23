"""What the dense candidate leg's memory vectors cost a namespace, by size and code.

    python -m benchmarks.memory_vectors_cost [--sizes 10000 100000 250000] [--queries 50]

For each code (``memory_vectors.CODES``) and namespace size: the bytes the vectors hold (the
arrays' own size: what a deployment's RSS grows by), the CPU of filling them row by row (as a
start-up that loads stored codes would, per memory), and the CPU of one ``nearest`` call (top
50, every memory admitted), median over the queries, with one BLAS thread (the graph's
setting). The scan is exact, so its cost does not depend on the vectors: random unit vectors
stand in for memories. A 1M store of four namespaces (docs/SCALING.md) scans 250k per search.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from keymem.services.graph.memory_vectors import CODES, MemoryVectors

DIM = 512
TOP = 50  # the leg's depth (the lexicon's BM25 depth)
CHUNK = 65_536  # random rows generated at a time


def measure(code: str, size: int, queries: int, rng: np.random.Generator) -> dict[str, float]:
    store = MemoryVectors(code)
    fill_cpu = 0.0
    for start in range(0, size, CHUNK):
        rows = rng.standard_normal((min(CHUNK, size - start), DIM)).astype(np.float32)
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        began = time.process_time()
        for offset, row in enumerate(rows):
            store.put("ns", f"m{start + offset}", row)
        fill_cpu += time.process_time() - began
    space = store.namespaces["ns"]
    # the rows in use (the arrays also keep spare capacity for writes: up to as much again)
    held = space.rows.nbytes * size // space.scales.shape[0]
    held += space.scales.nbytes * size // space.scales.shape[0] if code == "i8" else 0
    cpu = []
    for _ in range(queries):
        query = rng.standard_normal(DIM).astype(np.float32)
        query /= np.linalg.norm(query)
        began = time.process_time()
        store.nearest("ns", query, TOP, lambda _: True)
        cpu.append((time.process_time() - began) * 1000)
    return {
        "held_mb": round(held / 1e6, 1),
        "bytes_per_memory": round(held / size, 1),
        "fill_us_per_memory": round(fill_cpu / size * 1e6, 2),
        "query_cpu_ms_p50": round(statistics.median(cpu), 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 250_000])
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(12)
    with threadpool_limits(1):
        for size in args.sizes:
            for code in CODES:
                row = {"code": code, "memories": size, **measure(code, size, args.queries, rng)}
                print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
