"""``keymem report``: what the memory holds and how it behaved, in the terminal or as a page.

The terminal form is rich tables at most 100 columns wide; ``--html FILE`` writes one
self-contained page with the plots (docs/OBSERVABILITY.md says how to read both); ``--json``
prints everything collected.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from keymem.services.config import Settings
from keymem.services.report.collect import BUCKETS_BY_NAME, collect
from keymem.services.report.tables import TERMINAL_COLUMNS, render_terminal, sections

SINCE_DEFAULT = "30d"
UNIT_S = {"m": 60, "h": 3_600, "d": 86_400, "w": 7 * 86_400}
SINCE_FORMAT = re.compile(r"^(\d+)([mhdw])$")


def since_seconds(text: str) -> float:
    """``90m``, ``12h``, ``30d`` or ``2w`` in seconds."""
    found = SINCE_FORMAT.match(text.strip())
    if found is None or int(found.group(1)) == 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a window like 90m, 12h, 30d or 2w (a positive number and a unit)"
        )
    return int(found.group(1)) * UNIT_S[found.group(2)]


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report", help="what the memory holds and how it behaved (tables, or an HTML page)"
    )
    parser.add_argument(
        "--since",
        type=since_seconds,
        default=since_seconds(SINCE_DEFAULT),
        metavar="WINDOW",
        help=f"how far back to look: 90m, 12h, 30d, 2w (default {SINCE_DEFAULT})",
    )
    parser.add_argument("--html", type=Path, metavar="FILE", help="write the page with plots")
    parser.add_argument("--json", action="store_true", help="print everything collected")
    parser.add_argument(
        "--bucket",
        choices=sorted(BUCKETS_BY_NAME),
        help="the time step of tables and plots (default: sized to the data)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    bucket = BUCKETS_BY_NAME[args.bucket] if args.bucket else None
    report = collect(settings, time.time() - args.since, bucket)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    tables = sections(report)
    if args.html is not None:
        from keymem.services.report.page import page  # matplotlib only for the page

        try:
            args.html.write_text(page(report, tables), encoding="utf-8")
        except OSError as exc:
            print(f"keymem report: cannot write {args.html}: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {args.html}")
        return 0
    console = Console()
    console.width = (
        min(console.width, TERMINAL_COLUMNS) if console.is_terminal else TERMINAL_COLUMNS
    )
    render_terminal(tables, console)
    return 0
