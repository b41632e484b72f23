"""``keymem up``: start the supervised services and wait until every one answers."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from services.config import Settings
from services.supervision import READY_TIMEOUT_S, Supervision, SupervisionError


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("up", help="start keymem's services in the background")
    parser.add_argument(
        "--timeout", type=float, default=READY_TIMEOUT_S, help="seconds to wait for readiness"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    supervision = Supervision(settings)
    started = time.monotonic()
    try:
        with supervision.lock():
            fresh = supervision.start()
            supervision.wait_ready(args.timeout)
    except SupervisionError as exc:
        print(f"keymem up: {exc}", file=sys.stderr)
        return 1
    elapsed = time.monotonic() - started
    verb = "started" if fresh else "already running"
    print(f"keymem {verb}: all services ready in {elapsed:.2f} s (home {settings.home})")
    return 0
