"""``keymem down``: stop every service and supervisord; remove the sockets.

A stop can take long for a reason: the graph finishes a backup it has begun (up to
GRAPH_BACKUP_WAIT_AT_STOP_S) and folds its write-behind log into the file. ``down`` says what
it is waiting for before it waits, and afterwards which program took long or had to be killed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError
from keymem.services.catalog import GRAPH_BACKUP_WAIT_AT_STOP_S, stop_wait_s
from keymem.services.config import Settings
from keymem.services.supervision import Stopped, Supervision, SupervisionError

STATUS_TIMEOUT_MS = 1_000
# A program's stop worth naming: longer than closing its sockets takes.
SLOW_STOP_S = 2.0


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("down", help="stop keymem's services")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    supervision = Supervision(settings)
    try:
        with supervision.lock():
            if supervision.supervisord_pid() is not None:
                _say_what_the_stop_waits_for(settings)
            stopped = supervision.shutdown()
    except SupervisionError as exc:
        print(f"keymem down: {exc}", file=sys.stderr)
        return 1
    if stopped is None:
        print("keymem was not running")
        return 0
    print(describe(stopped))
    return 0


def _say_what_the_stop_waits_for(settings: Settings) -> None:
    """Name a backup the graph is taking: the stop lets it finish (nothing is said when the
    router or the graph does not answer; the stop goes on the same)."""
    try:
        with Client(settings.endpoints.frontend, timeout_ms=STATUS_TIMEOUT_MS) as client:
            reply = client.call("graph", "backup_status", {})
    except KeymemError:
        return
    if isinstance(reply, dict) and reply.get("status") == "running":
        print(
            f"keymem down: the graph is taking a backup ({reply.get('path')}); the stop lets it "
            f"finish, up to {GRAPH_BACKUP_WAIT_AT_STOP_S:.0f} s, then abandons it",
            flush=True,
        )


def describe(stopped: Stopped) -> str:
    """One line: stopped, with each program that took long and each that was killed."""
    killed = stopped.outlived_stop_wait()
    slow = [
        f"{name} {took:.1f} s"
        for name, took in sorted(stopped.seconds.items(), key=lambda item: -item[1])
        if took >= SLOW_STOP_S and name not in killed
    ]
    parts = [f"waited for {', '.join(slow)}"] if slow else []
    parts += [
        f"{name} did not stop within {stop_wait_s(name):.0f} s and was killed" for name in killed
    ]
    if stopped.killed:
        parts.append(f"killed leftover processes {', '.join(map(str, stopped.killed))}")
    return "keymem stopped" + (f" ({'; '.join(parts)})" if parts else "")
