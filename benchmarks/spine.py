"""Spine figures for docs/BENCHMARKS.md: start-up time, idle RSS, router overhead.

    python -m benchmarks.spine [--seconds 5] [--json]

Starts a fresh deployment in a temporary KEYMEM_HOME (real supervisord, real processes), times
`keymem up` until every service answers, reads each service's idle RSS, then measures `ping`
round trips to the embedder through the router and straight to the worker with 1 and 8 client
processes, in the same run, and stops everything.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from benchmarks.deployment import bench_home
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.services.loadtest import run_load

IDLE_SETTLE_S = 3.0
CLIENT_COUNTS = (1, 8)
TARGET_SERVICE = "embedder"


def measure(seconds: float) -> dict[str, Any]:
    with bench_home("km-bench-") as deployment:
        started = time.perf_counter()
        deployment.keymem("up")
        up_s = time.perf_counter() - started
        time.sleep(IDLE_SETTLE_S)
        status = json.loads(deployment.keymem("status", "--json").stdout)
        rss_mb = {n: round((s["rss_bytes"] or 0) / 2**20, 1) for n, s in status["services"].items()}
        endpoints = ipc_endpoints(deployment.home)
        with Client(endpoints.frontend) as client:
            stats = client.call("router", "stats")
        direct = stats["services"][TARGET_SERVICE]["workers"][0]["direct"]
        rows = []
        for clients in CLIENT_COUNTS:
            routed = run_load(
                endpoints.frontend, TARGET_SERVICE, clients=clients, seconds=seconds, path="router"
            )
            straight = run_load(
                direct, TARGET_SERVICE, clients=clients, seconds=seconds, path="direct"
            )
            rows.append(
                {
                    "clients": clients,
                    "router": routed.to_dict(),
                    "direct": straight.to_dict(),
                    "p50_ratio": round(routed.p50_ms / straight.p50_ms, 2),
                    "p99_ratio": round(routed.p99_ms / straight.p99_ms, 2),
                }
            )
        return {"up_to_ready_s": round(up_s, 2), "idle_rss_mb": rss_mb, "ping": rows}


def render(report: dict[str, Any]) -> str:
    lines = [
        f"`keymem up` to all-ready: {report['up_to_ready_s']:.2f} s (wall, incl. CLI start)",
        "",
        "| service | idle RSS (MB) |",
        "|---|---:|",
    ]
    lines += [f"| {name} | {mb} |" for name, mb in report["idle_rss_mb"].items()]
    lines += [
        "",
        "| clients | path | p50 ms | p99 ms | p99.9 ms | throughput/s |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for row in report["ping"]:
        for path in ("router", "direct"):
            r = row[path]
            lines.append(
                f"| {row['clients']} | {path} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} "
                f"| {r['p999_ms']:.3f} | {r['throughput_per_s']:.0f} |"
            )
        lines.append(
            f"| {row['clients']} | **router / direct** | **{row['p50_ratio']:.2f}x** "
            f"| {row['p99_ratio']:.2f}x | | |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = measure(args.seconds)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
