"""``keymem sleep [--dry-run] [--json]``: run the graph's sleep pass now.

The pass (services/graph/sleep.py) backs the graph up, decays unused learned links, merges keys
that are one concept and flags contradictions and near duplicates. The graph file has one
owner: when the graph service runs, it runs the pass between requests and this command polls
it; when keymem is down, this command opens the file and runs the pass itself.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import DeadlineExceeded, KeymemError
from keymem.services.cli import terminal
from keymem.services.config import Settings
from keymem.services.graph import GraphService
from keymem.services.graph.profile import key_profile_of
from keymem.store.database import StoreLocked, graph_path

CALL_TIMEOUT_MS = 10_000
PASS_TIMEOUT_S = 3_600.0  # a pass over 100k memories takes seconds (docs/BENCHMARKS.md)
POLL_INTERVAL_S = 0.2
COUNTS = ("decayed_links", "merged_keys", "contradictions", "near_duplicates")


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sleep",
        help="run the maintenance pass now: backup, decay, key merges, duplicate flags",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="report what the pass would do; change nothing"
    )
    terminal.add_json_flag(parser)
    parser.set_defaults(run=run)


def run_pass(settings: Settings, dry_run: bool) -> dict[str, Any]:
    """The pass's report, run by whoever owns the file: this process if it is free."""
    try:
        graph = GraphService(graph_path(settings.home), key_profile_of(settings.config))
    except StoreLocked:
        return _through_service(settings, dry_run)
    try:
        graph.start_sleep(dry_run)
        graph.wait_for_backup()  # the pass's first step; waiting beats polling it here
        running = graph.sleep_pass
        assert running is not None
        while not running.done:
            graph.sleep_tick()
        return running.report.to_wire()
    finally:
        graph.close()


def _through_service(settings: Settings, dry_run: bool) -> dict[str, Any]:
    give_up = time.monotonic() + PASS_TIMEOUT_S
    with Client(settings.endpoints.frontend, timeout_ms=CALL_TIMEOUT_MS) as client:
        reply: dict[str, Any] = client.call("graph", "sleep", {"dry_run": dry_run})
        while reply["status"] == "running":
            if time.monotonic() > give_up:
                raise DeadlineExceeded(f"the sleep pass is still running ({reply['phase']})")
            time.sleep(POLL_INTERVAL_S)
            reply = client.call("graph", "sleep_status", {})
    return reply


def render(report: dict[str, Any]) -> None:
    out = terminal.console()
    title = "sleep (dry run: nothing changed)" if report["dry_run"] else "sleep"
    grid = terminal.table(f"{title}: {report['status']} in {report['seconds']:.1f} s")
    grid.add_column("what")
    grid.add_column("count", justify="right")
    for name in COUNTS:
        grid.add_row(name.replace("_", " "), str(report[name]))
    out.print(grid)
    if report["merges"]:
        merges = terminal.table("key merges (first 20)")
        for column in ("namespace", "kept", "absorbed", "reason"):
            merges.add_column(column, overflow="fold")
        for row in report["merges"]:
            merges.add_row(row["namespace"], row["kept"], row["absorbed"], row["reason"])
        out.print(merges)
    if report["flags"]:
        flags = terminal.table("flagged pairs (first 20)")
        for column in ("kind", "memory", "other"):
            flags.add_column(column)
        for row in report["flags"]:
            flags.add_row(row["kind"], row["memory_id"], row["other_id"])
        out.print(flags)
    if report["backup"]:
        out.print(f"backup: {report['backup']}")


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    if not graph_path(settings.home).exists():
        print(f"keymem sleep: no graph at {graph_path(settings.home)}", file=sys.stderr)
        return 1
    try:
        report = run_pass(settings, args.dry_run)
    except KeymemError as exc:
        print(f"keymem sleep: {exc}", file=sys.stderr)
        return 1
    if args.json:
        terminal.print_json(report)
    else:
        render(report)
    if report["status"] != "done":
        print(f"keymem sleep: the pass failed: {report['error']}", file=sys.stderr)
        return 1
    return 0
