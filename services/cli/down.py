"""``keymem down``: stop every service and supervisord; remove the sockets."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from keymem.services.config import Settings
from keymem.services.supervision import Supervision, SupervisionError


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("down", help="stop keymem's services")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    supervision = Supervision(Settings.from_env())
    try:
        with supervision.lock():
            stopped = supervision.shutdown()
    except SupervisionError as exc:
        print(f"keymem down: {exc}", file=sys.stderr)
        return 1
    print("keymem stopped" if stopped else "keymem was not running")
    return 0
