"""`keymem up` after `keymem down` on one store, trees alternating round by round: what a change
to the services' start costs or saves, read within one run (the host's speed swings within a
day, so `up` figures of two runs hours apart do not compare).

    python -m benchmarks.up_pairs --store STORE/graph.duckdb --rounds 4 --tree SNAP_A --tree SNAP_B

Each ``--tree`` is a byte-compiled ``git archive`` snapshot whose ``pkg/keymem`` links its
top-level folders (docs/BENCHMARKS.md), run as ``PYTHONPATH=TREE/pkg:TREE``; with none, this
checkout alone. One home is made from a copy of the store and started once, until the
deployment is quiet (the lexicon's first index, the graph's approximate key indexes: both
saved, so no round builds them); then each round stops it and starts it under each tree in
turn, timing ``up`` until every service is ready and then until the lexicon serves every
memory again. One JSON line per start.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import duckdb

from benchmarks.deployment import BenchHome, bench_home
from benchmarks.footprint import cpu_s, deployment_processes
from benchmarks.recall_bench import LIVENESS
from benchmarks.scale_1m import UP_TIMEOUT_S, lexicon_serving
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.store.database import graph_path

SETTLE_S = 3.0  # after a `down`, before the next `up`: the stopped processes' pages go back
QUIET_WINDOW_S = 5.0
QUIET_CPU_SHARE = 0.1  # of one core, all the deployment's processes over a window
QUIET_GIVE_UP_S = 1_800.0


def active_memories(store: Path) -> int:
    conn = duckdb.connect(str(store), read_only=True)
    try:
        (count,) = conn.execute(
            "SELECT count(*) FROM memories WHERE superseded_by IS NULL"
        ).fetchone() or (0,)
    finally:
        conn.close()
    return int(count)


def deployment_cpu_s(deployment: BenchHome) -> float:
    """CPU seconds so far of every process supervisord runs for the deployment."""
    return sum(cpu_s(process) for process in deployment_processes(deployment))


def wait_quiet(deployment: BenchHome) -> float:
    """Seconds until the deployment's processes use under ``QUIET_CPU_SHARE`` of a core."""
    started = time.monotonic()
    before = deployment_cpu_s(deployment)
    while time.monotonic() - started < QUIET_GIVE_UP_S:
        time.sleep(QUIET_WINDOW_S)
        now = deployment_cpu_s(deployment)
        if now - before < QUIET_CPU_SHARE * QUIET_WINDOW_S:
            return time.monotonic() - started
        before = now
    raise TimeoutError("the deployment did not settle")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True, help="a graph.duckdb to copy")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--tree", type=Path, action="append", default=[])
    args = parser.parse_args()
    memories = active_memories(args.store)
    trees: list[Path | None] = list(args.tree) or [None]
    with bench_home("km-up-") as deployment:
        deployment.env["KEYMEM_HEARTBEAT_LIVENESS"] = LIVENESS  # a large store's long calls
        shutil.copy(args.store, graph_path(deployment.home))
        endpoints = ipc_endpoints(deployment.home)
        base_env = dict(deployment.env)
        for round_number in [-1, *range(args.rounds)]:  # -1: the first start, not reported
            for tree in trees[:1] if round_number < 0 else trees:
                deployment.env.clear()
                deployment.env.update(base_env)
                if tree is not None:
                    deployment.env["PYTHONPATH"] = f"{tree}/pkg:{tree}"
                deployment.keymem("down")
                time.sleep(SETTLE_S)
                load = os.getloadavg()[0]
                started = time.perf_counter()
                deployment.keymem("up", "--timeout", UP_TIMEOUT_S)
                up_s = time.perf_counter() - started
                with Client(endpoints.frontend) as client:
                    lexicon_s = lexicon_serving(client, memories)
                if round_number < 0:
                    wait_quiet(deployment)
                else:
                    print(
                        json.dumps(
                            {
                                "round": round_number,
                                "tree": str(tree or "checkout"),
                                "up_s": round(up_s, 2),
                                "lexicon_serving_after_s": round(lexicon_s, 1),
                                "load_average": round(load, 2),
                            }
                        ),
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
