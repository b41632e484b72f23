"""``keymem migrate``: re-embed every key with the embedder now running (after a model switch)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError
from keymem.services.config import Settings
from keymem.services.memory.migration import migrate_if_needed


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migrate", help="re-embed all keys into the current embedding model's space"
    )
    parser.add_argument(
        "--force", action="store_true", help="re-embed even when the recorded model matches"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    try:
        with Client(settings.endpoints.frontend) as client:
            found, report = migrate_if_needed(client, force=args.force)
    except KeymemError as exc:
        print(f"keymem migrate: {exc} (is `keymem up` running?)", file=sys.stderr)
        return 1
    if report is None:
        print(f"nothing to do: keys are in {found.embedder['fingerprint']!r}")
    else:
        print(
            f"re-embedded {report['replaced']} keys into {report['fingerprint']!r}; "
            f"backup at {report['backup']}"
        )
    return 0
