"""Closed-loop load generation: N client processes call one method as fast as replies come.

Used by ``keymem bench`` and by the benchmark docs; each client is a separate process so the
measurement is not bounded by the load generator's own GIL.
"""

from __future__ import annotations

import multiprocessing
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError
from keymem.protocol.stats import percentile

START_DELAY_S = 1.5  # lets every spawned client connect before the clock starts
CALL_TIMEOUT_MS = 5_000


@dataclass(frozen=True)
class LoadResult:
    path: str  # "router" or "direct"
    endpoint: str
    service: str
    method: str
    clients: int
    seconds: float
    requests: int
    errors: int
    errors_by_code: dict[str, int]
    throughput_per_s: float
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _client_loop(
    endpoint: str, service: str, method: str, body: Any, start_at: float, seconds: float
) -> tuple[list[float], dict[str, int]]:
    latencies_us: list[float] = []
    errors: Counter[str] = Counter()
    with Client(endpoint, timeout_ms=CALL_TIMEOUT_MS) as client:
        try:
            client.call(service, "ping")  # connect and warm up before the clock starts
        except KeymemError:
            pass
        time.sleep(max(0.0, start_at - time.time()))
        stop_at = time.perf_counter() + seconds
        while (started := time.perf_counter()) < stop_at:
            try:
                client.call(service, method, body)
                latencies_us.append((time.perf_counter() - started) * 1e6)
            except KeymemError as exc:
                errors[exc.code.value] += 1
    return latencies_us, dict(errors)


def run_load(
    endpoint: str,
    service: str,
    method: str = "ping",
    body: Any = None,
    *,
    clients: int = 1,
    seconds: float = 5.0,
    path: str = "router",
) -> LoadResult:
    start_at = time.time() + START_DELAY_S + 0.05 * clients
    args = [(endpoint, service, method, body, start_at, seconds)] * clients
    with multiprocessing.get_context("spawn").Pool(clients) as pool:
        outcomes = pool.starmap(_client_loop, args)
    latencies = sorted(us for lat, _ in outcomes for us in lat)
    errors: Counter[str] = Counter()
    for _, errs in outcomes:
        errors.update(errs)
    ms = [us / 1000 for us in latencies]
    return LoadResult(
        path=path,
        endpoint=endpoint,
        service=service,
        method=method,
        clients=clients,
        seconds=seconds,
        requests=len(ms),
        errors=sum(errors.values()),
        errors_by_code=dict(errors),
        throughput_per_s=round(len(ms) / seconds, 1),
        p50_ms=round(percentile(ms, 0.50), 3),
        p99_ms=round(percentile(ms, 0.99), 3),
        p999_ms=round(percentile(ms, 0.999), 3),
        max_ms=round(ms[-1], 3) if ms else 0.0,
    )
