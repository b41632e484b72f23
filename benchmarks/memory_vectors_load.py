"""What loading the dense leg's memory codes adds to a graph's start, at a given store size.

    python -m benchmarks.memory_vectors_load [--memories 1000000] [--namespaces 4]

A synthetic graph file (the lead's scale stores have no memory vectors: embedding a million
texts is ~45 min of model CPU) with ``--memories`` active memories over ``--namespaces``
namespaces and a random 64-byte code for each, made by the recorded embedder. It times, in CPU
and wall seconds, the two steps a start adds: the store's read of the codes and of the backlog
(``GraphStore._load_memory_codes``: two queries, one buffer per namespace) and the graph's
build of its scan structures (``GraphState._load_memory_vectors``), and the RSS they hold.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import duckdb
import numpy as np
import psutil

from keymem.services.graph.memory_vectors import PRODUCT_CODE, MemoryVectors
from keymem.store.database import GraphStore, LoadedGraph
from keymem.store.schema import migrate

FINGERPRINT = "synthetic:random-codes"
DIM = 512


def build(path: Path, memories: int, namespaces: int) -> None:
    """The file: ``memories`` active memories, each with a random code."""
    conn = duckdb.connect(str(path))
    migrate(conn)
    conn.execute(
        "INSERT INTO meta VALUES ('fingerprint', ?), ('dim', ?), ('epoch', 'synthetic')",
        [FINGERPRINT, str(DIM)],
    )
    conn.execute(
        "INSERT INTO memories SELECT printf('%012x', i), 'ns' || (i % ?), 'text ' || i, "
        "i::DOUBLE, NULL, NULL, NULL, 0.5, 0, 0.0, NULL, 0.0, 1, 'standard', NULL, NULL, NULL "
        "FROM range(?) t(i)",
        [namespaces, memories],
    )
    # four md5 digests a row: 64 pseudo-random bytes, made inside DuckDB
    digests = " || ".join(f"md5('{salt}' || i)" for salt in "abcd")
    conn.execute(
        f"INSERT INTO memory_vectors SELECT printf('%012x', i), unhex({digests}), ? "
        "FROM range(?) t(i)",
        [FINGERPRINT, memories],
    )
    conn.execute("CHECKPOINT")
    conn.close()


def measure(path: Path) -> dict[str, float]:
    store = GraphStore(path)
    try:
        graph = LoadedGraph(meta=store.read_meta())
        rows = store._load_memories(graph)
        gc.collect()
        store.release_cache()
        rss = psutil.Process().memory_info().rss
        cpu, wall = time.process_time(), time.perf_counter()
        store._load_memory_codes(graph, rows)
        read_cpu, read_wall = time.process_time() - cpu, time.perf_counter() - wall
        cpu, wall = time.process_time(), time.perf_counter()
        ids = np.ma.getdata(graph.memory_columns["id"])
        vectors = MemoryVectors(PRODUCT_CODE)
        for group in graph.memory_codes:
            members = ids[group.positions].tolist()
            namespace = graph.memories[members[0]].namespace
            vectors.load(namespace, DIM, members, group.codes)
        build_cpu, build_wall = time.process_time() - cpu, time.perf_counter() - wall
        del graph.memory_codes
        gc.collect()
        store.release_cache()  # what DuckDB cached for the queries goes, as after a start
        held_mb = (psutil.Process().memory_info().rss - rss) / 2**20
        return {
            "codes": len(vectors),
            "read_cpu_s": read_cpu,
            "read_wall_s": read_wall,
            "build_cpu_s": build_cpu,
            "build_wall_s": build_wall,
            "held_mb": held_mb,
        }
    finally:
        store.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=1_000_000)
    parser.add_argument("--namespaces", type=int, default=4)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="km-mvload-") as home:
        path = Path(home) / "graph.duckdb"
        build(path, args.memories, args.namespaces)
        result = measure(path)
    print(
        f"{args.memories:,} memories in {args.namespaces} namespaces: "
        + ", ".join(f"{k} {v:,.2f}" for k, v in result.items())
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
