"""Counters and a rolling latency window, reported by workers and the router alike."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

LATENCY_WINDOW_SAMPLES = 1024
# Every service's liveness probe (``keymem up`` sends dozens while the services start): its
# answers, ``unavailable`` included, are counted apart so they never read as errors or latency.
PROBE_METHOD = "ping"
# A write the graph answers with the keys it lacks (``KeysUnheld``): the memory service sends it
# again with their vectors, so it is counted as a step of the write (``keys_asked``), not an error.
KEYS_ASKED_CODE = "keys_unheld"


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already-sorted values (0.0 when empty)."""
    if not sorted_values:
        return 0.0
    rank = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[rank]


@dataclass
class LatencyWindow:
    """The most recent request latencies, in microseconds."""

    samples_us: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW_SAMPLES))

    def add(self, micros: float) -> None:
        self.samples_us.append(micros)

    def summary(self) -> dict[str, float]:
        ordered = sorted(self.samples_us)
        return {
            "p50_us": round(percentile(ordered, 0.50), 1),
            "p99_us": round(percentile(ordered, 0.99), 1),
            "max_us": round(ordered[-1], 1) if ordered else 0.0,
        }


@dataclass
class RequestStats:
    """What one worker, or the router for one service, has served."""

    requests: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    expired: int = 0
    latency: LatencyWindow = field(default_factory=LatencyWindow)
    probes: int = 0
    probes_failed: int = 0
    keys_asked: int = 0

    def record(self, micros: float, error_code: str | None = None, method: str = "") -> None:
        if method == PROBE_METHOD:
            self.probes += 1
            self.probes_failed += int(error_code is not None)
            return
        self.requests += 1
        self.latency.add(micros)
        if error_code == KEYS_ASKED_CODE:
            self.keys_asked += 1
        elif error_code is not None:
            self.errors[error_code] += 1

    def to_wire(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "errors": sum(self.errors.values()),
            "errors_by_code": dict(self.errors),
            "expired": self.expired,
            "probes": self.probes,
            "probes_failed": self.probes_failed,
            "keys_asked": self.keys_asked,
            **self.latency.summary(),
        }
