"""A worker service's restart: from ``kill -9`` to its new process answering through the router.

A real deployment (``keymem up``, supervisord, the shipped heartbeat) with nothing else running
in it: each worker is killed with SIGKILL, and the time until a ``ping`` through the router is
answered by a new process is its recovery, the figure the chaos suite's long form measures
under load (docs/RELIABILITY.md). With it, the CPU time (user + system) the new process had
spent when it first answered: its start-up cost, steadier than wall time on a busy machine.

The embedder and the reranker restart twice per round: with their USE-m cache
(``KEYMEM_HOME/cache/usem3``, services/embedder/backends/usem3_cache.py) and with it blocked
(``KEYMEM_HOME/cache`` replaced by a file, so the model is parsed from its package as it was
before the cache existed), interleaved so both see the same machine. The lexicon and the
graph, whose supervised processes keep Kiwi or their libraries loaded and fork the worker
(services/prefork.py, catalog.PRELOADERS), are killed twice per round: the worker (forked
again; the CPU is the new worker's) and its parent (a cold start; the CPU is the new parent's
and worker's). Medians over the rounds. Then each service's
memory: the proportional set size (PSS: shared pages split among their sharers) of its
processes, summed, and each one's private (USS) and resident (RSS) size.

    python -m benchmarks.service_startup [--rounds 5] [--services embedder,reranker,...]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from benchmarks.deployment import BenchHome, bench_home
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.protocol.errors import KeymemError
from keymem.services.catalog import PRELOADERS
from keymem.services.config import WORKER_SERVICES
from keymem.services.embedder.backends.usem3_cache import cache_dir

MODEL_SERVICES = ("embedder", "reranker")
PING_TIMEOUT_MS = 1_000
PING_EVERY_S = 0.01
GIVE_UP_S = 180.0
LOG_TAIL_LINES = 20
SETTLE_S = 1.0  # between kills: the previous restart's last writes and log lines


@dataclass
class Runs:
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)

    def row(self, label: str) -> str:
        wall = sorted(self.wall_s)
        return (
            f"| {label} | {statistics.median(wall):.2f} ({wall[0]:.2f}-{wall[-1]:.2f}) "
            f"| {statistics.median(self.cpu_s):.2f} | {len(wall)} |"
        )


def ping_pid(client: Client, name: str) -> int:
    pid: int = client.call(name, "ping", timeout_ms=PING_TIMEOUT_MS)["pid"]
    return pid


def cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def restart(client: Client, home: Path, name: str, *, parent: bool = False) -> tuple[float, float]:
    """Kill ``name`` (with ``parent``, the process its worker was forked from); seconds until a
    new worker answers, and the CPU seconds of the processes that started it."""
    old = ping_pid(client, name)
    victim = psutil.Process(old).ppid() if parent else old
    killed_at = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    while time.monotonic() - killed_at < GIVE_UP_S:
        try:
            pid = ping_pid(client, name)
        except KeymemError:
            pid = old
        if pid != old:
            wall_s = time.monotonic() - killed_at
            worker = psutil.Process(pid)
            started = [worker, worker.parent()] if parent else [worker]
            return wall_s, sum(cpu_s(p) for p in started if p is not None)
        time.sleep(PING_EVERY_S)
    logs = "\n".join(
        "\n".join(log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
        for log in sorted((home / "logs").glob(f"{name}*"))
    )
    raise SystemExit(f"{name} did not answer within {GIVE_UP_S:.0f} s of its kill\n{logs}")


@contextlib.contextmanager
def model_cache_blocked(home: Path) -> Iterator[None]:
    """The USE-m cache moved aside and its directory made impossible to create, then back."""
    blocker = cache_dir(home).parent
    aside = blocker.with_name(blocker.name + ".aside")
    blocker.rename(aside)
    blocker.write_bytes(b"")
    try:
        yield
    finally:
        blocker.unlink()
        aside.rename(blocker)


def modes_of(name: str) -> tuple[str, ...]:
    if name in MODEL_SERVICES:
        return ("cached", "uncached")
    if name in PRELOADERS:
        return ("worker", "parent")
    return ("",)


def memory(client: Client, names: list[str]) -> list[str]:
    """Table rows: each service's processes (a preforked one's parent first), their PSS summed,
    and each one's USS (its private pages) and RSS."""
    rows = []
    for name in names:
        worker = psutil.Process(ping_pid(client, name))
        parent = worker.parent()
        processes = [parent, worker] if name in PRELOADERS and parent is not None else [worker]
        infos = [p.memory_full_info() for p in processes]
        pss = sum(i.pss for i in infos) / 2**20
        uss = " + ".join(f"{i.uss / 2**20:.0f}" for i in infos)
        rss = " + ".join(f"{i.rss / 2**20:.0f}" for i in infos)
        rows.append(f"| {name} | {len(processes)} | {pss:.0f} | {uss} | {rss} |")
    return rows


def measure(deployed: BenchHome, services: list[str], rounds: int) -> dict[str, Runs]:
    results: dict[str, Runs] = {}
    with Client(ipc_endpoints(deployed.home).frontend) as client:
        for _ in range(rounds):
            for name in services:
                for mode in modes_of(name):
                    blocking = (
                        model_cache_blocked(deployed.home)
                        if mode == "uncached"
                        else contextlib.nullcontext()
                    )
                    with blocking:
                        time.sleep(SETTLE_S)
                        wall_s, used_s = restart(
                            client, deployed.home, name, parent=mode == "parent"
                        )
                    runs = results.setdefault(f"{name} {mode}".strip(), Runs())
                    runs.wall_s.append(wall_s)
                    runs.cpu_s.append(used_s)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--services", default=",".join(WORKER_SERVICES))
    args = parser.parse_args(argv)
    services = [s for s in args.services.split(",") if s]
    unknown = set(services) - set(WORKER_SERVICES)
    if unknown:
        parser.error(f"unknown service(s): {', '.join(sorted(unknown))}")
    with bench_home("km-start-") as deployed:
        deployed.keymem("up")
        # the first restart of each model service writes its cache; the rounds then start warm
        measure(deployed, [s for s in services if s in MODEL_SERVICES], 1)
        load_before = os.getloadavg()[0]
        results = measure(deployed, services, args.rounds)
        load_after = os.getloadavg()[0]
        with Client(ipc_endpoints(deployed.home).frontend) as client:
            memory_rows = memory(client, services)
    print(
        f"kill -9 to first answer through the router, {args.rounds} rounds; "
        f"load average {load_before:.1f} before, {load_after:.1f} after"
    )
    print("| service | wall s, median (range) | CPU s at first answer, median | kills |")
    print("|---|---|---|---|")
    for label, runs in results.items():
        print(runs.row(label))
    print("\nmemory after the rounds (MiB)")
    print("| service | processes | PSS, summed | USS each | RSS each |")
    print("|---|---|---|---|---|")
    print("\n".join(memory_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
