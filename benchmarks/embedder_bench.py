"""Embedder figures for docs/BENCHMARKS.md: load time, RSS, keys/s by batch and by clients.

    python -m benchmarks.embedder_bench [--seconds 5] [--json]

Starts real processes in a temporary KEYMEM_HOME: a router and one embedder worker (the same
``python -m keymem.services NAME`` supervisord runs), then drives them with closed-loop client
processes. Every request carries keys no earlier request used, so neither the vector cache nor
the in-batch de-duplication can flatter the numbers (the cache is also off:
``KEYMEM_EMBED_CACHE=0``). Micro-batching on and off are measured in the same run, each on a
freshly started worker, so their ratio compares like with like.

``keymem bench embedder --method embed --body '{"texts": ["Python"]}'`` measures the same
service with one fixed body (so: the cache-hit path).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from benchmarks.deployment import bench_home
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.protocol.errors import KeymemError
from keymem.protocol.stats import percentile

START_TIMEOUT_S = 60.0
START_DELAY_S = 2.0  # lets every spawned client connect before the clock starts
CALL_TIMEOUT_MS = 10_000
BATCH_SIZES = (1, 8, 32)
CLIENT_COUNTS = (1, 8, 32)
SINGLE_KEY_SAMPLES = 2000
# Short, key-like concepts; a per-request counter keeps every text unique.
CONCEPTS = (
    "strawberry",
    "딸기",
    "イチゴ",
    "Python packaging",
    "파이썬 가상환경",
    "deadline",
    "회의 일정",
    "peanut allergy",
    "user preferences",
    "데이터베이스 백업",
)


@dataclass(frozen=True)
class Deployment:
    home: Path
    frontend: str
    env: dict[str, str]
    processes: list[subprocess.Popen[bytes]]

    def worker_stats(self, service: str) -> dict[str, Any]:
        with Client(self.frontend, timeout_ms=5_000) as client:
            stats = client.call("router", "stats")
        workers: list[dict[str, Any]] = stats["services"].get(service, {}).get("workers", [])
        return workers[0] if workers else {}

    def direct(self, service: str) -> str:
        return str(self.worker_stats(service)["direct"])

    def pids(self, service: str) -> dict[str, int]:
        """The router's and the service worker's process ids, for CPU accounting."""
        return {"router": self.processes[0].pid, service: int(self.worker_stats(service)["pid"])}

    def rss_mb(self, service: str) -> float:
        with Client(self.direct(service), timeout_ms=5_000) as client:
            rss: int = client.call(service, "stats")["rss_bytes"]
        return round(rss / 2**20, 1)


def _spawn(name: str, env: dict[str, str], log_dir: Path) -> subprocess.Popen[bytes]:
    log = (log_dir / f"{name}.log").open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "keymem.services", name], env=env, stdout=log, stderr=log
    )


@contextmanager
def deployment(
    services: dict[str, dict[str, str]],
) -> Iterator[tuple[Deployment, dict[str, float]]]:
    """A router plus the given workers (name -> extra env) as real processes.

    Only what is measured runs (no supervisord, lexicon or graph competing for the two cores).
    Yields the deployment and, per service, seconds from spawn until it answered via the router.
    """
    with bench_home("km-eb-") as bench:
        (bench.home / "logs").mkdir(parents=True, exist_ok=True)
        processes = [_spawn("router", bench.env, bench.home / "logs")]
        frontend = ipc_endpoints(bench.home).frontend
        ready: dict[str, float] = {}
        try:
            for name, extra in services.items():
                started = time.perf_counter()
                processes.append(_spawn(name, {**bench.env, **extra}, bench.home / "logs"))
                _wait_ready(frontend, name)
                ready[name] = round(time.perf_counter() - started, 2)
            yield Deployment(bench.home, frontend, bench.env, processes), ready
        finally:
            for process in reversed(processes):
                process.terminate()
            for process in processes:
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()


def _wait_ready(frontend: str, service: str) -> None:
    give_up = time.monotonic() + START_TIMEOUT_S
    with Client(frontend, timeout_ms=1_000) as client:
        while time.monotonic() < give_up:
            try:
                client.call(service, "info", timeout_ms=1_000)
                return
            except KeymemError:
                time.sleep(0.1)
    raise RuntimeError(f"{service} did not answer within {START_TIMEOUT_S:.0f} s")


# -- closed-loop load with unique bodies ------------------------------------------------------
def embed_body(client_id: int, call: int, batch: int) -> dict[str, Any]:
    texts = [f"{CONCEPTS[(call + j) % len(CONCEPTS)]} {client_id}-{call}-{j}" for j in range(batch)]
    return {"texts": texts, "kind": "key"}


def _loop(
    endpoint: str,
    service: str,
    method: str,
    spec: dict[str, Any],
    client_id: int,
    start_at: float,
    seconds: float,
) -> tuple[list[float], int]:
    from benchmarks import reranker_bench  # the pool maker lives there; spawn re-imports

    latencies: list[float] = []
    errors = 0
    with Client(endpoint, timeout_ms=CALL_TIMEOUT_MS) as client:
        try:
            client.call(service, "ping")
        except KeymemError:
            pass
        time.sleep(max(0.0, start_at - time.time()))
        stop_at = time.perf_counter() + seconds
        call = 0
        while (started := time.perf_counter()) < stop_at:
            if spec["kind"] == "embed":
                body = embed_body(client_id, call, spec["batch"])
            else:
                body = reranker_bench.pool_body(spec, client_id, call)
            call += 1
            try:
                client.call(service, method, body)
                latencies.append((time.perf_counter() - started) * 1000)
            except KeymemError:
                errors += 1
    return latencies, errors


def _cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def closed_loop(
    endpoint: str,
    service: str,
    method: str,
    spec: dict[str, Any],
    clients: int,
    seconds: float,
    watch: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Run the clients; ``watch`` names processes whose CPU time per request is reported too.

    CPU per request does not depend on what else runs on the machine the way wall-clock
    throughput does, so it tells what a quiet machine would do.
    """
    start_at = time.time() + START_DELAY_S + 0.05 * clients
    args = [(endpoint, service, method, spec, i, start_at, seconds) for i in range(clients)]
    watch = watch or {}
    with multiprocessing.get_context("spawn").Pool(clients) as pool:
        pending = pool.starmap_async(_loop, args)
        time.sleep(max(0.0, start_at - time.time()))
        cpu_before = {name: _cpu_s(pid) for name, pid in watch.items()}
        outcomes = pending.get()
        cpu_after = {name: _cpu_s(pid) for name, pid in watch.items()}
    latencies = sorted(ms for lat, _ in outcomes for ms in lat)
    row: dict[str, Any] = {
        "clients": clients,
        "requests": len(latencies),
        "errors": sum(e for _, e in outcomes),
        "requests_per_s": round(len(latencies) / seconds, 1),
        "p50_ms": round(percentile(latencies, 0.50), 3),
        "p99_ms": round(percentile(latencies, 0.99), 3),
    }
    for name in watch:
        row[f"{name}_cpu_ms_per_request"] = round(
            1000 * (cpu_after[name] - cpu_before[name]) / max(1, len(latencies)), 3
        )
    return row


def single_key_latency(endpoint: str, samples: int = SINGLE_KEY_SAMPLES) -> dict[str, float]:
    """One client, one new key per call, sequential: the latency a recall pays."""
    latencies: list[float] = []
    with Client(endpoint, timeout_ms=CALL_TIMEOUT_MS) as client:
        for call in range(samples):
            body = embed_body(999, call, 1)
            started = time.perf_counter()
            client.call("embedder", "embed", body)
            latencies.append((time.perf_counter() - started) * 1000)
    latencies.sort()
    return {
        "samples": samples,
        "p50_ms": round(percentile(latencies, 0.50), 3),
        "p99_ms": round(percentile(latencies, 0.99), 3),
    }


def measure(seconds: float) -> dict[str, Any]:
    report: dict[str, Any] = {"load_avg_before": os.getloadavg()[0]}
    no_cache = {"KEYMEM_EMBED_CACHE": "0"}
    with deployment({"embedder": {**no_cache, "KEYMEM_EMBED_BATCHING": "true"}}) as (dep, ready):
        with Client(dep.frontend) as client:
            info = client.call("embedder", "info")
        report["model"] = info["fingerprint"]
        report["model_load_s"] = info["load_seconds"]
        report["spawn_to_ready_s"] = ready["embedder"]
        report["rss_after_load_mb"] = dep.rss_mb("embedder")
        report["one_key_router"] = single_key_latency(dep.frontend)
        report["one_key_direct"] = single_key_latency(dep.direct("embedder"))
        report["by_batch"] = []
        for batch in BATCH_SIZES:
            row = closed_loop(
                dep.frontend,
                "embedder",
                "embed",
                {"kind": "embed", "batch": batch},
                1,
                seconds,
                dep.pids("embedder"),
            )
            row["batch"] = batch
            row["keys_per_s"] = round(row["requests_per_s"] * batch, 1)
            report["by_batch"].append(row)
        report["by_clients"] = {"on": _by_clients(dep, seconds)}
        report["rss_after_load_test_mb"] = dep.rss_mb("embedder")
    with deployment({"embedder": {**no_cache, "KEYMEM_EMBED_BATCHING": "false"}}) as (dep, _):
        report["by_clients"]["off"] = _by_clients(dep, seconds)
    report["load_avg_after"] = os.getloadavg()[0]
    return report


def _by_clients(dep: Deployment, seconds: float) -> list[dict[str, Any]]:
    rows = []
    for clients in CLIENT_COUNTS:
        row = closed_loop(
            dep.frontend,
            "embedder",
            "embed",
            {"kind": "embed", "batch": 1},
            clients,
            seconds,
            dep.pids("embedder"),
        )
        row["keys_per_s"] = row["requests_per_s"]
        rows.append(row)
    return rows


def render(report: dict[str, Any]) -> str:
    lines = [
        f"model `{report['model']}`; load {report['model_load_s']:.2f} s in process, "
        f"{report['spawn_to_ready_s']:.2f} s from spawn to answering through the router; "
        f"RSS {report['rss_after_load_mb']} MB after load, "
        f"{report['rss_after_load_test_mb']} MB after the load test; "
        f"load average {report['load_avg_before']:.2f} before, "
        f"{report['load_avg_after']:.2f} after",
        "",
        "| one new key, 1 client, sequential | p50 ms | p99 ms |",
        "|---|---:|---:|",
    ]
    for path in ("router", "direct"):
        row = report[f"one_key_{path}"]
        lines.append(f"| {path} | {row['p50_ms']:.3f} | {row['p99_ms']:.3f} |")
    lines += [
        "",
        "| keys per request (1 client) | keys/s | p50 ms | p99 ms | embedder CPU ms/key |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in report["by_batch"]:
        per_key = row["embedder_cpu_ms_per_request"] / row["batch"]
        lines.append(
            f"| {row['batch']} | {row['keys_per_s']:.0f} | {row['p50_ms']:.2f} "
            f"| {row['p99_ms']:.2f} | {per_key:.3f} |"
        )
    lines += [
        "",
        "| clients (1 key each) | batching | keys/s | p50 ms | p99 ms | errors "
        "| embedder CPU ms/key | router CPU ms/key |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    on, off = report["by_clients"]["on"], report["by_clients"]["off"]
    for row_on, row_off in zip(on, off, strict=True):
        for label, row in (("on", row_on), ("off", row_off)):
            lines.append(
                f"| {row['clients']} | {label} | {row['keys_per_s']:.0f} | {row['p50_ms']:.2f} | "
                f"{row['p99_ms']:.2f} | {row['errors']} | "
                f"{row['embedder_cpu_ms_per_request']:.3f} | "
                f"{row['router_cpu_ms_per_request']:.3f} |"
            )
        ratio = row_on["keys_per_s"] / row_off["keys_per_s"] if row_off["keys_per_s"] else 0.0
        lines.append(f"| {row_on['clients']} | **on / off** | **{ratio:.2f}x** | | | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="embedder benchmark")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = measure(args.seconds)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
