"""``keymem export FILE``: the whole graph as portable JSON (key vectors included).

Reads the graph file directly when no service holds it; otherwise asks the graph service for
a backup snapshot and exports that, so a running service is never blocked by a long export.
Never overwrites FILE.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import duckdb

from keymem.protocol.errors import KeymemError
from keymem.services.cli.backup import snapshot
from keymem.services.config import Settings
from keymem.store.backup import BACKUPS_KEPT
from keymem.store.database import GraphStore, StoreLocked, graph_path
from keymem.store.portable import export_graph


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("export", help="export the graph as portable JSON")
    parser.add_argument("file", type=Path, help="output file (must not exist)")
    parser.set_defaults(run=run)


def export_home(settings: Settings, out: Path) -> dict[str, int]:
    try:
        store = GraphStore(graph_path(settings.home))
    except StoreLocked:
        source = snapshot(settings, BACKUPS_KEPT)
        conn = duckdb.connect(str(source), read_only=True)
        try:
            return export_graph(conn, out)
        finally:
            conn.close()
    try:
        return export_graph(store.conn, out)
    finally:
        store.close()


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    out: Path = args.file
    if out.exists():
        print(f"keymem export: {out} exists; refusing to overwrite it", file=sys.stderr)
        return 1
    if not graph_path(settings.home).exists():
        print(f"keymem export: no graph at {graph_path(settings.home)}", file=sys.stderr)
        return 1
    try:
        counts = export_home(settings, out)
    except (KeymemError, FileExistsError) as exc:
        print(f"keymem export: {exc}", file=sys.stderr)
        return 1
    print(f"exported {counts['memories']} memories, {counts['keys']} keys to {out}")
    return 0
