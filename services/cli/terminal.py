"""How the store commands print: rich tables sized to the terminal, or JSON with ``--json``.

rich measures the terminal (``COLUMNS`` when stdout is not one, else 80 columns) and folds or
ellipsises cells to fit it, so no row is wider than the screen.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from rich.console import Console
from rich.table import Table

TIME_FORMAT = "%Y-%m-%d %H:%M"
DAY_FORMAT = "%Y-%m-%d"
PREVIEW_CHARS = 120  # a memory's text in a table row, before rich fits it to the width


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def console() -> Console:
    return Console(highlight=False, soft_wrap=False)


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def table(title: str | None = None, *, expand: bool = False, header: bool = True) -> Table:
    return Table(
        title=title,
        title_justify="left",
        show_edge=False,
        pad_edge=False,
        expand=expand,
        show_header=header,
    )


def when(timestamp: float | None) -> str:
    return "-" if not timestamp else time.strftime(TIME_FORMAT, time.localtime(timestamp))


def day(timestamp: float) -> str:
    return time.strftime(DAY_FORMAT, time.localtime(timestamp))


def one_line(text: str, max_chars: int = PREVIEW_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= max_chars else flat[: max_chars - 1] + "…"


def size(n_bytes: int) -> str:
    value = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"
