"""``keymem import FILE``: add an export's keys and memories to this home's graph.

The whole file is checked first (``services/graph/imports.py``) and a bad one is refused with
one line naming the problem, nothing written. Then one transaction; ids that already exist are
skipped, so importing twice adds nothing the second time. The graph file has one owner, so the
graph service must be stopped first (``keymem down``); the import appends change-feed events,
so the lexicon catches up on start.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from keymem.protocol.errors import KeymemError
from keymem.services.config import Settings
from keymem.services.graph.imports import validate_export
from keymem.store.database import GraphStore, StoreLocked, graph_path
from keymem.store.portable import import_graph, read_export


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("import", help="import a keymem export (skips existing ids)")
    parser.add_argument("file", type=Path, help="a file written by keymem export")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    try:
        document = read_export(args.file)
    except (OSError, ValueError, RecursionError, KeymemError) as exc:
        # ValueError: not JSON or not UTF-8; RecursionError: nested past what json can read
        print(f"keymem import: cannot read {args.file}: {exc}", file=sys.stderr)
        return 1
    try:
        store = GraphStore(graph_path(settings.home))
    except StoreLocked:
        print(
            "keymem import: the graph service holds the database; run `keymem down` first",
            file=sys.stderr,
        )
        return 1
    try:
        validate_export(document, store.conn)
        added = import_graph(store, document)
    except KeymemError as exc:
        print(f"keymem import: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()
    print(f"imported {added['memories']} memories, {added['keys']} keys, {added['links']} links")
    return 0
