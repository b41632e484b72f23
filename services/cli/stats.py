"""``keymem stats``: per namespace — memories, keys, links, hubs, the stale share, and size.

The graph file holds every namespace; a namespace's size on disk is the file's size shared out
by what each namespace stores (its versions' text and its keys' vectors).
"""

from __future__ import annotations

import argparse
from typing import Any

from keymem.services.cli import terminal
from keymem.services.cli.store import counts, store_command
from keymem.services.config import Settings
from keymem.store.database import graph_path

WAL_SUFFIX = ".wal"


def file_bytes(settings: Settings) -> int:
    path = graph_path(settings.home)
    return sum(
        p.stat().st_size for p in (path, path.with_name(path.name + WAL_SUFFIX)) if p.exists()
    )


def collect(settings: Settings) -> dict[str, Any]:
    found = counts(settings, detail=True)
    on_disk = file_bytes(settings)
    stored = found["bytes"]
    rows = {
        ns: {
            **row,
            "stale_share": round(row["stale"] / row["memories"], 3) if row["memories"] else 0.0,
            "disk_bytes": round(on_disk * row["bytes"] / stored) if stored else 0,
        }
        for ns, row in sorted(found["namespaces"].items())
    }
    return {
        "home": str(settings.home),
        "graph_file": str(graph_path(settings.home)),
        "disk_bytes": on_disk,
        "totals": {name: found[name] for name in ("memories", "versions", "keys", "links")}
        | {"hubs": found["hubs"], "stale": found["stale"]},
        "namespaces": rows,
    }


def render(report: dict[str, Any]) -> None:
    grid = terminal.table(f"{report['graph_file']}: {terminal.size(report['disk_bytes'])}")
    for column in ("namespace", "memories", "versions", "keys", "links", "hubs", "stale", "disk"):
        grid.add_column(column, justify="left" if column == "namespace" else "right")
    grid.columns[0].overflow = "fold"
    for ns, row in report["namespaces"].items():
        grid.add_row(
            ns,
            str(row["memories"]),
            str(row["versions"]),
            str(row["keys"]),
            str(row["links"]),
            str(row["hubs"]),
            terminal.share(row["stale"], row["memories"]),
            terminal.size(row["disk_bytes"]),
        )
    totals = report["totals"]
    grid.add_section()
    grid.add_row(
        "all",
        *(str(totals[name]) for name in ("memories", "versions", "keys", "links", "hubs")),
        terminal.share(totals["stale"], totals["memories"]),
        terminal.size(report["disk_bytes"]),
    )
    terminal.console().print(grid)


@store_command("stats")
def run(args: argparse.Namespace, settings: Settings) -> int:
    report = collect(settings)
    if args.json:
        terminal.print_json(report)
    else:
        render(report)
    return 0


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("stats", help="per-namespace sizes, hubs and staleness")
    terminal.add_json_flag(parser)
    parser.set_defaults(run=run)
