"""``keymem status``: per-service state from supervisord joined with the router's counters."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from keymem.hooks.prompt_submit import FAILURE_LOG, FAILURE_LOG_BACKUP
from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError
from keymem.services.config import ALL_PROGRAMS, Settings
from keymem.services.identity import Identity
from keymem.services.keys import LOCAL_CLIENT
from keymem.services.supervision import Supervision

STATS_TIMEOUT_MS = 1_000
# The hook's failures older than this are history, not a problem to report.
HOOK_FAILURE_WINDOW_S = 24 * 3600
COLUMNS = (
    ("service", 9),
    ("state", 9),
    ("pid", 8),
    ("uptime", 9),
    ("workers", 7),
    ("requests", 9),
    ("errors", 6),
    ("p50 ms", 8),
    ("p99 ms", 8),
    ("rss MB", 7),
    ("log", 0),
)


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("status", help="show each service's state and load")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(run=run)


def collect(settings: Settings) -> dict[str, Any]:
    supervision = Supervision(settings)
    supervisord = supervision.supervisord_pid()
    report: dict[str, Any] = {
        "home": str(settings.home),
        "running": supervisord is not None,
        "supervisord_pid": supervisord,
        "services": {},
    }
    processes = supervision.service_processes() if supervisord else {}
    router: dict[str, Any] = {}
    if supervisord:
        try:
            with Client(settings.endpoints.frontend, timeout_ms=STATS_TIMEOUT_MS) as client:
                router = client.call("router", "stats")
        except KeymemError as exc:
            report["router_error"] = str(exc)
    report["hook"] = hook_failures(settings)
    if router:
        report["keymem"] = Identity.from_wire(router.get("router")).to_wire()
    routed = router.get("services", {})
    for name in ALL_PROGRAMS:
        process = processes.get(name)
        counters = router.get("router", {}) if name == "router" else routed.get(name, {})
        workers = counters.get("workers", [])
        report["services"][name] = {
            "program": process.name if process else supervision.host[name],
            "state": process.state if process else "STOPPED",
            "pid": process.pid if process else None,
            "uptime_s": process.uptime_s if process else 0.0,
            "workers": 1 if name == "router" and counters else len(workers),
            "requests": counters.get("requests", 0),
            "errors": counters.get("errors", 0),
            "p50_ms": counters.get("p50_us", 0.0) / 1000,
            "p99_ms": counters.get("p99_us", 0.0) / 1000,
            "rss_bytes": counters.get("rss_bytes")
            if name == "router"
            else sum(w.get("rss_bytes", 0) for w in workers),
            "log": str(supervision.log_path(name)),
        }
    report["remote_workers"] = remote_workers(routed)
    return report


def remote_workers(routed: dict[str, Any]) -> list[dict[str, Any]]:
    """Workers the router admitted under another host's CURVE key (``keymem worker``)."""
    return [
        {
            "service": name,
            "address": worker["address"],
            "key": worker["key"],
            "pid": worker.get("pid"),
            "requests": worker.get("requests", 0),
        }
        for name, service in sorted(routed.items())
        for worker in service.get("workers", [])
        if worker.get("key") not in (None, LOCAL_CLIENT)
    ]


def hook_failures(settings: Settings, window_s: float = HOOK_FAILURE_WINDOW_S) -> dict[str, Any]:
    """How often the prompt-submit hook gave up (it prints nothing then, by design) in the
    last ``window_s`` seconds, and the latest of those failures."""
    since = time.time() - window_s
    recent = []
    for name in (FAILURE_LOG_BACKUP, FAILURE_LOG):  # oldest first
        try:
            lines = (settings.log_dir / name).read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                entry = json.loads(line)
                at = float(entry["at"])
            except (ValueError, TypeError, KeyError):
                continue  # a line cut by a full disk or a crash
            if at >= since:
                recent.append(entry)
    return {
        "failures": len(recent),
        "window_s": window_s,
        "last": recent[-1] if recent else None,
    }


def _uptime(seconds: float) -> str:
    if seconds <= 0:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _shared_processes(services: dict[str, Any]) -> list[str]:
    """A note per program running several services: their pid and memory are one process's."""
    hosted: dict[str, list[str]] = {}
    for name, service in services.items():
        hosted.setdefault(service["program"], []).append(name)
    return [
        f"{' and '.join(names)} share one process ({program}): pid and rss MB are counted once"
        for program, names in hosted.items()
        if len(names) > 1
    ]


def window_text(seconds: float) -> str:
    return f"in the last {seconds / 3600:.0f} h"


def render(report: dict[str, Any]) -> str:
    lines = [f"keymem home {report['home']}: " + ("running" if report["running"] else "stopped")]
    if "keymem" in report:
        lines[0] += f" ({Identity.from_wire(report['keymem']).describe()})"
    lines.append("  ".join(title.ljust(width) for title, width in COLUMNS).rstrip())
    for name, s in report["services"].items():
        rss = s["rss_bytes"]
        cells = (
            name,
            s["state"],
            str(s["pid"] or "-"),
            _uptime(s["uptime_s"]),
            str(s["workers"]),
            str(s["requests"]),
            str(s["errors"]),
            f"{s['p50_ms']:.3f}",
            f"{s['p99_ms']:.3f}",
            f"{rss / 2**20:.0f}" if rss else "-",
            s["log"],
        )
        padded = (cell.ljust(width) for cell, (_, width) in zip(cells, COLUMNS, strict=True))
        lines.append("  ".join(padded).rstrip())
    lines.extend(_shared_processes(report["services"]))
    lines.extend(
        f"remote {w['service']} worker at {w['address']} (key {w['key']}, pid {w['pid']}): "
        f"{w['requests']} requests"
        for w in report["remote_workers"]
    )
    hook = report["hook"]
    if hook["failures"]:
        last = hook["last"] or {}
        lines.append(
            f"hook: {hook['failures']} failed call(s) {window_text(hook['window_s'])}; "
            f"last: {last.get('reason', '?')}"
        )
    if "router_error" in report:
        lines.append(f"router did not answer: {report['router_error']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    report = collect(Settings.from_env())
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0 if report["running"] else 3
