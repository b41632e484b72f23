"""``keymem up``: start the supervised services and wait until every one answers."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from protocol.client import Client
from protocol.errors import KeymemError
from services.cli.migrate import migrate_if_needed
from services.config import Settings
from services.router.migration import auto_migrate_enabled, spaces
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
            with Client(settings.endpoints.frontend) as client:
                found = spaces(client)
                if found.mismatch and not auto_migrate_enabled():
                    print(
                        f"keymem up: {found.describe()}. Writes are refused until the keys are "
                        "re-embedded: run `keymem migrate`, or unset KEYMEM_AUTO_MIGRATE=false.",
                        file=sys.stderr,
                    )
                    return 1
                migrate_if_needed(client)
    except SupervisionError as exc:
        print(f"keymem up: {exc}", file=sys.stderr)
        return 1
    except KeymemError as exc:
        print(f"keymem up: services are up but the model check failed: {exc}", file=sys.stderr)
        return 1
    elapsed = time.monotonic() - started
    verb = "started" if fresh else "already running"
    print(f"keymem {verb}: all services ready in {elapsed:.2f} s (home {settings.home})")
    return 0
