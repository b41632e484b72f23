"""Idle memory of a whole deployment and recall latency, a process per model vs one shared.

    python -m benchmarks.footprint [--rounds 10] [--searches 20] [--json]

Starts two real deployments side by side in temporary homes: ``KEYMEM_SHARED_MODEL=false``
(the embedder and the reranker each in its own process with its own USE-m) and the default
(both in one process on one model, services/shared_model.py). Each gets the same ten memories
through the router; once idle, every process supervisord runs (the lexicon's forked worker
included) is measured: RSS, and PSS, which splits pages shared between processes (the
lexicon's parent and child share Kiwi) so that the sum is what the deployment really holds.
Then ``memory.search`` latency, in interleaved rounds (one round on each deployment in turn)
so both see the same machine load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

import psutil

from benchmarks.deployment import BenchHome, bench_home
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.protocol.stats import percentile

PLACEMENTS = {"separate": "false", "shared": "true"}
MEMORIES = (
    ("The user's daughter is allergic to peanuts", ["daughter", "peanut allergy"]),
    ("The team deploys the shop with a blue-green switch on Fridays", ["deploy", "shop"]),
    ("사용자는 부산에 살고 딸기를 좋아한다", ["부산", "딸기"]),
    ("Backups of the graph run nightly at 02:00 into /srv/backup", ["backup", "graph"]),
    ("The user prefers tea over coffee in the afternoon", ["tea", "coffee"]),
    ("The CI runner has 2 cores and 24 GiB of memory", ["CI runner", "cores"]),
    ("日本の出張は来月の第二週に予定されている", ["出張", "来月"]),
    ("The API rate limit is 600 requests per minute per key", ["rate limit", "API"]),
    ("The cat is called Miso and she is nine years old", ["cat", "Miso"]),
    ("Invoices are due on the 15th; the accountant is Dana", ["invoices", "accountant"]),
)
QUERIES = (
    "what is my daughter allergic to",
    "when do we deploy the shop",
    "딸기 좋아하는 사람",
    "where do the backups go",
    "tea or coffee",
    "how many cores does CI have",
    "出張はいつ",
    "what is the rate limit",
)
IDLE_SETTLE_S = 5.0
UP_TIMEOUT_S = "300"


def deployment_processes(deployment: BenchHome) -> list[psutil.Process]:
    """supervisord's children, grandchildren included (the lexicon forks its worker)."""
    pid = int((deployment.home / "run" / "supervisord.pid").read_text())
    return psutil.Process(pid).children(recursive=True)


def models_process(deployment: BenchHome) -> psutil.Process:
    """The process that holds the reranker (``models`` when it shares the embedder's model)."""
    for process in deployment_processes(deployment):
        if any(name in " ".join(process.cmdline()) for name in ("models", "reranker")):
            return process
    raise RuntimeError("no models or reranker process in the deployment")


def cpu_s(process: psutil.Process) -> float:
    """User + system CPU seconds the process has used."""
    times = process.cpu_times()
    return float(times.user + times.system)


def memory_mb(deployment: BenchHome) -> dict[str, Any]:
    rows = []
    rss_mb, pss_mb = [], []
    for process in deployment_processes(deployment):
        info = process.memory_full_info()
        rss_mb.append(round(info.rss / 2**20, 1))
        pss_mb.append(round(info.pss / 2**20, 1))
        program = " ".join(process.cmdline()[-1:])
        rows.append(
            {"program": program, "pid": process.pid, "rss_mb": rss_mb[-1], "pss_mb": pss_mb[-1]}
        )
    return {
        "processes": rows,
        "rss_total_mb": round(sum(rss_mb), 1),
        "pss_total_mb": round(sum(pss_mb), 1),
    }


@contextlib.contextmanager
def started(placement: str) -> Iterator[BenchHome]:
    with bench_home(f"km-fp-{placement[:3]}-") as deployment:
        deployment.env["KEYMEM_SHARED_MODEL"] = PLACEMENTS[placement]
        deployment.keymem("up", "--timeout", UP_TIMEOUT_S)
        with Client(ipc_endpoints(deployment.home).frontend, timeout_ms=30_000) as client:
            for content, keys in MEMORIES:
                client.call("memory", "remember", {"content": content, "keys": keys})
            for query in QUERIES:  # warm: the first search of a text pays its model time
                client.call("memory", "search", {"query": query})
        yield deployment


def search_round(deployment: BenchHome, searches: int) -> list[float]:
    taken = []
    with Client(ipc_endpoints(deployment.home).frontend, timeout_ms=30_000) as client:
        for i in range(searches):
            began = time.perf_counter()
            client.call("memory", "search", {"query": QUERIES[i % len(QUERIES)]})
            taken.append((time.perf_counter() - began) * 1000)
    return taken


def measure(rounds: int, searches: int) -> dict[str, Any]:
    with started("separate") as separate, started("shared") as shared:
        deployments = {"separate": separate, "shared": shared}
        time.sleep(IDLE_SETTLE_S)
        report: dict[str, Any] = {
            name: {"memory": memory_mb(d), "load_average": psutil.getloadavg()[0]}
            for name, d in deployments.items()
        }
        latencies: dict[str, list[float]] = {name: [] for name in deployments}
        round_medians: dict[str, list[float]] = {name: [] for name in deployments}
        for _ in range(rounds):
            for name, deployment in deployments.items():
                taken = search_round(deployment, searches)
                latencies[name] += taken
                round_medians[name].append(statistics.median(taken))
        for name, taken in latencies.items():
            ordered = sorted(taken)
            report[name]["search_ms"] = {
                "p50": round(percentile(ordered, 0.5), 2),
                "p99": round(percentile(ordered, 0.99), 2),
                "count": len(ordered),
            }
        ratios = [
            s / p for s, p in zip(round_medians["shared"], round_medians["separate"], strict=True)
        ]
        report["shared_over_separate_p50_round_median"] = round(statistics.median(ratios), 3)
        report["round_medians_ms"] = {
            name: [round(m, 2) for m in medians] for name, medians in round_medians.items()
        }
        report["load_average_end"] = psutil.getloadavg()[0]
        return report


def render(report: dict[str, Any]) -> str:
    lines = []
    for name in PLACEMENTS:
        found = report[name]
        memory = found["memory"]
        lines.append(
            f"{name}: idle RSS {memory['rss_total_mb']} MB, PSS {memory['pss_total_mb']} MB "
            f"in {len(memory['processes'])} processes; search p50 {found['search_ms']['p50']} "
            f"ms, p99 {found['search_ms']['p99']} ms"
        )
        for row in memory["processes"]:
            lines.append(
                f"  {row['program']:<10} pid {row['pid']:<8} RSS {row['rss_mb']:>7} MB  "
                f"PSS {row['pss_mb']:>7} MB"
            )
    lines.append(
        "search p50, shared / separate (median of per-round ratios): "
        f"{report['shared_over_separate_p50_round_median']}; load average at the end "
        f"{report['load_average_end']:.1f}"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--searches", type=int, default=20, help="searches per round")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = measure(args.rounds, args.searches)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
