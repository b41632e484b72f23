"""What an idle deployment costs: CPU per idle second of every process supervisord runs.

    python -m benchmarks.idle_cpu [--seconds 30] [--rounds 3]

Starts a fresh deployment in a temporary KEYMEM_HOME, saves a memory (so the lexicon follows a
live feed), waits until it settles, then reads each process's CPU time (user + system) before
and after ``--seconds`` of no calls at all. CPU time, not wall time: it does not depend on
what else the machine runs.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from typing import Any

import psutil

from benchmarks.deployment import bench_home
from benchmarks.footprint import deployment_processes
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints

SETTLE_S = 5.0
MS_PER_S = 1000.0


def _program(process: psutil.Process) -> str:
    """The program a process runs (a forked worker is named after its parent's program)."""
    name = process.cmdline()[-1]
    parent = process.parent()
    if parent is not None and parent.cmdline() == process.cmdline():
        return f"{name} (worker)"
    return name


def _cpu_s(processes: list[psutil.Process]) -> dict[str, float]:
    found: dict[str, float] = defaultdict(float)
    for process in processes:
        times = process.cpu_times()
        found[_program(process)] += times.user + times.system
    return found


def measure(seconds: float, rounds: int) -> dict[str, Any]:
    with bench_home("km-idle-") as deployment:
        deployment.keymem("up")
        with Client(ipc_endpoints(deployment.home).frontend, timeout_ms=30_000) as client:
            client.call("memory", "remember", {"content": "an idle store", "keys": ["idle"]})
        time.sleep(SETTLE_S)
        processes = deployment_processes(deployment)
        per_round = []
        for _ in range(rounds):
            before = _cpu_s(processes)
            time.sleep(seconds)
            after = _cpu_s(processes)
            per_round.append(
                {
                    name: round((cpu - before[name]) / seconds * MS_PER_S, 2)
                    for name, cpu in after.items()
                }
            )
    return {"seconds": seconds, "cpu_ms_per_idle_s": per_round}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(measure(args.seconds, args.rounds), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
