"""What ``keymem report`` shows, gathered into one JSON-able mapping.

Three sources, none of them the DuckDB file (only the graph service opens it): the event
journal's day files (services/journal.py), the hook's failure log, and the graph's
``overview`` (growth, validity, hubs), asked through the router, or computed here from the
file when keymem is down (then nobody else holds it).

Time is cut into buckets sized to the data: a window of a few minutes of traffic is shown per
minute, a day per hour, a month per day (``BUCKET_CHOICES_S``; ``--bucket`` overrides).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from keymem.hooks.prompt_submit import FAILURE_LOG
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_path
from keymem.protocol.errors import KeymemError, NotFound
from keymem.services.config import Settings
from keymem.services.graph.overview import overview
from keymem.services.graph.profile import key_profile_of
from keymem.services.graph.state import GraphState
from keymem.services.journal import Event, read_events
from keymem.store.database import GraphStore, graph_path

# Bucket widths to choose from, smallest first; the first that cuts the window into at most
# ``MAX_BUCKETS`` is taken.
BUCKET_CHOICES_S = (60, 300, 900, 3_600, 21_600, 86_400)
BUCKETS_BY_NAME = {"minute": 60, "hour": 3_600, "day": 86_400}
MAX_BUCKETS = 48
OVERVIEW_TIMEOUT_MS = 10_000
HUBS_SHOWN = 10
MS_DIGITS = 1
SHARE_DIGITS = 3
LATENCY_METHODS = ("inject", "recall", "search")
ABSTAINING_METHODS = ("recall", "search")
# journal kind -> (series name, the field that counts, or None for one per event)
COUNTED: dict[str, list[tuple[str, str | None]]] = {
    "remember": [("remembered", "n"), ("deduplicated", "dedup")],
    "correct": [("corrected", None)],
    "forget": [("forgotten", "n")],
    "sweep": [("expired", "expired")],
    "read": [("read", None)],
    "confirm": [("confirmed", None)],
    "dismiss": [("dismissed", None)],
    "hebbian": [
        ("strengthened", "strengthened"),
        ("decayed", "decayed"),
        ("associated", "associated"),
    ],
    "recall": [("recalls", None)],
    "search": [("searches", None)],
}
WRITE_SERIES = ("remembered", "deduplicated", "corrected", "forgotten", "expired")
LEARNING_SERIES = (
    "read",
    "confirmed",
    "dismissed",
    "strengthened",
    "decayed",
    "associated",
    "learned_aliases",
)
HOOK_OUTCOMES = ("shown", "silent", "failed")


def choose_bucket(span_s: float) -> int:
    for width in BUCKET_CHOICES_S:
        if span_s / width <= MAX_BUCKETS:
            return width
    return BUCKET_CHOICES_S[-1]


def bucket_label(start: float, bucket_s: int) -> str:
    at = datetime.fromtimestamp(start, UTC)
    return at.strftime("%Y-%m-%d" if bucket_s >= 86_400 else "%m-%d %H:%M")


def hook_failure_times(log_dir: Path, since: float) -> list[float]:
    """When the prompt-submit hook gave up (it prints nothing then): its failure log and the
    rotated generation beside it."""
    times = []
    for path in sorted(log_dir.glob(f"{FAILURE_LOG}*")):
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                at = float(json.loads(line)["at"])
            except (ValueError, TypeError, KeyError):
                continue
            if at >= since:
                times.append(at)
    return sorted(times)


class Timeline:
    """Series of per-bucket values over ``[start, end)``."""

    def __init__(self, start: float, end: float, bucket_s: int) -> None:
        self.start, self.bucket_s = start, bucket_s
        self.count = max(1, math.ceil((end - start) / bucket_s))
        self.series: dict[str, list[float]] = {}
        self.samples: dict[str, list[list[float]]] = {}

    def index(self, at: float) -> int:
        return min(self.count - 1, max(0, int((at - self.start) // self.bucket_s)))

    def add(self, name: str, at: float, amount: float = 1) -> None:
        self.series.setdefault(name, [0] * self.count)[self.index(at)] += amount

    def sample(self, name: str, at: float, value: float) -> None:
        buckets = self.samples.setdefault(name, [[] for _ in range(self.count)])
        buckets[self.index(at)].append(value)

    def get(self, name: str) -> list[float]:
        return self.series.get(name, [0] * self.count)

    def labels(self) -> list[str]:
        return [
            bucket_label(self.start + i * self.bucket_s, self.bucket_s) for i in range(self.count)
        ]


def percentile(values: Iterable[float], q: float) -> float | None:
    found = list(values)
    return round(float(np.percentile(found, q)), MS_DIGITS) if found else None


def _latency(timeline: Timeline, method: str) -> dict[str, Any]:
    buckets = timeline.samples.get(method, [[] for _ in range(timeline.count)])
    every = [v for bucket in buckets for v in bucket]
    return {
        "n": [len(b) for b in buckets],
        "p50": [percentile(b, 50) for b in buckets],
        "p95": [percentile(b, 95) for b in buckets],
        "all": {"n": len(every), "p50": percentile(every, 50), "p95": percentile(every, 95)},
    }


def _share(part: float, whole: float) -> float | None:
    return round(part / whole, SHARE_DIGITS) if whole else None


def summarise(
    events: list[Event],
    hook_failures: list[float],
    since: float,
    now: float,
    bucket_s: int | None = None,
) -> dict[str, Any]:
    """The journal's sections of the report: activity, hook, latency, learning, sleep."""
    first = min([e["t"] for e in events] + hook_failures, default=since)
    width = bucket_s or choose_bucket(now - max(since, first))
    start = max(since, first) // width * width
    timeline = Timeline(start, now + 1e-6, width)
    abstained = {m: [0, 0] for m in ABSTAINING_METHODS}
    sleeps = []
    for event in events:
        at, kind = event["t"], event.get("kind")
        for name, field in COUNTED.get(str(kind), []):
            amount = event.get(field, 0) if field else 1
            if isinstance(amount, int | float) and amount:
                timeline.add(name, at, amount)
        if kind == "read" and event.get("learned_alias"):
            timeline.add("learned_aliases", at)
        if kind in LATENCY_METHODS and isinstance(event.get("ms"), int | float):
            timeline.sample(str(kind), at, float(event["ms"]))
        if kind == "inject" and event.get("outcome") in ("shown", "silent"):
            timeline.add(str(event["outcome"]), at)
        if kind in abstained and "error" not in event:
            abstained[kind][0] += bool(event.get("abstained"))
            abstained[kind][1] += 1
        if kind == "sleep":
            sleeps.append({k: v for k, v in event.items() if k not in ("kind", "source")})
    for at in hook_failures:
        timeline.add("failed", at)
    shown, silent = sum(timeline.get("shown")), sum(timeline.get("silent"))
    return {
        "since": since,
        "start": start,
        "bucket_s": width,
        "buckets": timeline.labels(),
        "bucket_starts": [start + i * width for i in range(timeline.count)],
        "writes": {name: timeline.get(name) for name in WRITE_SERIES},
        "reads": {name: timeline.get(name) for name in ("read", "recalls", "searches")},
        "hook": {
            **{outcome: timeline.get(outcome) for outcome in HOOK_OUTCOMES},
            "silence_share": _share(silent, shown + silent),
            "failed_share": _share(len(hook_failures), shown + silent + len(hook_failures)),
        },
        "latency": {method: _latency(timeline, method) for method in LATENCY_METHODS},
        "abstention": {
            m: {"share": _share(n_abstained, n), "n": n}
            for m, (n_abstained, n) in abstained.items()
        },
        "learning": {name: timeline.get(name) for name in LEARNING_SERIES},
        "sleep": sleeps,
    }


def store_overview(settings: Settings, start: float, bucket_s: int) -> dict[str, Any]:
    """The graph's ``overview``: from the running graph service, or, with keymem down, from
    the file, opened here as ``keymem backup`` does (it has one owner at a time)."""
    body = {"start": start, "bucket_s": bucket_s, "hubs": HUBS_SHOWN}
    socket_file = ipc_path(settings.endpoints.frontend)
    if socket_file is None or socket_file.exists():
        with Client(settings.endpoints.frontend, timeout_ms=OVERVIEW_TIMEOUT_MS) as client:
            found: dict[str, Any] = client.call("graph", "overview", body)
        return found
    path = graph_path(settings.home)
    if not path.exists():
        raise NotFound(f"no store at {path} yet")
    store = GraphStore(path)
    try:
        hub_min_links = key_profile_of(settings.config).hub_min_links
        return overview(GraphState(store.load(), hub_min_links), body, time.time())
    finally:
        store.close()


def collect(settings: Settings, since: float, bucket_s: int | None = None) -> dict[str, Any]:
    now = time.time()
    events = list(read_events(settings.home, since))
    report = summarise(events, hook_failure_times(settings.log_dir, since), since, now, bucket_s)
    report["home"] = str(settings.home)
    report["generated_at"] = now
    try:
        report["store"] = store_overview(settings, report["start"], report["bucket_s"])
    except (KeymemError, OSError) as exc:
        report["store"] = None
        report["store_error"] = f"the store could not be read: {exc}"
    return report
