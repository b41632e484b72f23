"""``keymem up``: start the supervised services and wait until every one answers."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from keymem.services.config import Settings
from keymem.services.launcher import ensure_up
from keymem.services.supervision import SupervisionError


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("up", help="start keymem's services in the background")
    parser.add_argument(
        "--timeout",
        type=float,
        help="seconds to wait for readiness (default: KEYMEM_UP_TIMEOUT_S)",
    )
    parser.add_argument(
        "--restart",
        action="store_true",
        help="stop running services first, so they start with this command's settings",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    try:
        launch = ensure_up(settings, timeout_s=args.timeout, restart=args.restart)
    except SupervisionError as exc:
        print(f"keymem up: {exc}", file=sys.stderr)
        return 1
    verb = "started" if launch.started else "already running"
    print(f"keymem {verb}: all services ready in {launch.elapsed_s:.2f} s (home {settings.home})")
    if launch.replaced:
        print(f"keymem up: {launch.replaced}", file=sys.stderr)
    if launch.differences:
        print(f"keymem up: {launch.describe_differences()}", file=sys.stderr)
    return 0
