"""``keymem backup``: a consistent snapshot of the graph file under KEYMEM_HOME/backups.

The graph file has one owner. When the graph service runs, it takes the snapshot itself
(checkpoint, copy, rename); when it does not, this command opens the file and does the same.
The newest ``--keep`` backups are kept.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import DeadlineExceeded, InternalError, KeymemError
from keymem.services.config import Settings
from keymem.store.backup import BACKUPS_KEPT, backup_dir, take_backup
from keymem.store.database import GraphStore, StoreLocked, graph_path

SERVICE_TIMEOUT_MS = 600_000
CALL_TIMEOUT_MS = 5_000
POLL_INTERVAL_S = 0.1


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("backup", help="snapshot the graph database (with rotation)")
    parser.add_argument("--keep", type=int, default=BACKUPS_KEPT, help="backups to keep")
    parser.set_defaults(run=run)


def snapshot(settings: Settings, keep: int) -> Path:
    """Take a backup through whoever can: this process if the file is free, else the service."""
    try:
        store = GraphStore(graph_path(settings.home))
    except StoreLocked:
        return _through_service(settings, keep)
    try:
        return take_backup(store, backup_dir(settings.home), keep=keep)
    finally:
        store.close()


def _through_service(settings: Settings, keep: int) -> Path:
    """The service copies in the background (it must keep serving): start, then poll."""
    give_up = time.monotonic() + SERVICE_TIMEOUT_MS / 1000
    with Client(settings.endpoints.frontend, timeout_ms=CALL_TIMEOUT_MS) as client:
        reply = client.call("graph", "backup", {"keep": keep})
        while reply["status"] == "running":
            if time.monotonic() > give_up:
                raise DeadlineExceeded(f"backup to {reply['path']} still running")
            time.sleep(POLL_INTERVAL_S)
            reply = client.call("graph", "backup_status", {})
    if reply["status"] != "done":
        raise InternalError(f"backup failed: {reply.get('error')}")
    return Path(reply["path"])


def run(args: argparse.Namespace) -> int:
    if args.keep < 1:
        print("keymem backup: --keep must be at least 1", file=sys.stderr)
        return 2
    settings = Settings.from_env()
    if not graph_path(settings.home).exists():
        print(f"keymem backup: no graph at {graph_path(settings.home)}", file=sys.stderr)
        return 1
    try:
        path = snapshot(settings, args.keep)
    except KeymemError as exc:
        print(f"keymem backup: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0
