"""``keymem migrate``: re-embed every key with the embedder now running (after a model switch)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from protocol.client import Client
from protocol.errors import KeymemError
from services.config import Settings
from services.router.migration import Spaces, reembed_all, spaces


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migrate", help="re-embed all keys into the current embedding model's space"
    )
    parser.add_argument(
        "--force", action="store_true", help="re-embed even when the recorded model matches"
    )
    parser.set_defaults(run=run)


def show_progress(done: int, total: int) -> None:
    end = "\n" if done >= total else ""
    print(f"\rre-embedding keys: {done}/{total}", end=end, file=sys.stderr, flush=True)


def migrate_if_needed(
    client: Client, *, force: bool = False
) -> tuple[Spaces, dict[str, Any] | None]:
    """Re-embed when the spaces differ (or ``force``); returns the spaces and the report."""
    found = spaces(client)
    if not (found.mismatch or (force and found.graph is not None)):
        return found, None
    print(f"keymem: {found.describe()}; re-embedding every key", file=sys.stderr)
    return found, reembed_all(client, show_progress)


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
