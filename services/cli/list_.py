"""``keymem list``: the newest memories of one namespace, or of every namespace."""

from __future__ import annotations

import argparse
from typing import Any

from keymem.services.cli import terminal
from keymem.services.cli.store import ask, counts, store_command
from keymem.services.config import Settings

LIMIT_DEFAULT = 20


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("list", help="list the newest memories per namespace")
    parser.add_argument("-n", "--namespace", help="only this namespace (default: every one)")
    parser.add_argument("--limit", type=int, default=LIMIT_DEFAULT, help="memories per namespace")
    parser.add_argument("--offset", type=int, default=0, help="skip this many newest ones")
    parser.add_argument("--all", action="store_true", help="superseded versions too")
    terminal.add_json_flag(parser)
    parser.set_defaults(run=run)


def pages(args: argparse.Namespace, settings: Settings) -> list[dict[str, Any]]:
    spaces = [args.namespace] if args.namespace else sorted(counts(settings)["namespaces"])
    body = {
        "limit": args.limit,
        "offset": args.offset,
        "include_inactive": args.all,
        "max_chars": terminal.PREVIEW_CHARS,
    }
    return [ask(settings, "graph", "list_memories", {**body, "namespace": ns}) for ns in spaces]


def render(found: list[dict[str, Any]]) -> None:
    out = terminal.console()
    if not found:
        out.print("The store is empty.")
    for page in found:
        shown = len(page["memories"])
        title = f"{page['namespace']}: {page['total']} memories" + (
            f" (showing {shown})" if shown < page["total"] else ""
        )
        grid = terminal.table(title, expand=True)
        grid.add_column("id", no_wrap=True)
        grid.add_column("saved", no_wrap=True)
        grid.add_column("validity", no_wrap=True)
        grid.add_column("memory", overflow="fold", ratio=2)
        grid.add_column("keys", ratio=1)
        for memory in page["memories"]:
            status = memory["validity"]["status"] + ("" if memory["active"] else " (old)")
            grid.add_row(
                memory["id"],
                terminal.day(memory["created_at"]),
                status,
                terminal.one_line(memory["content"]),
                ", ".join(memory["keys"]),
            )
        out.print(grid)
        if page["next_offset"] is not None:
            out.print(f"  more: keymem list -n {page['namespace']} --offset {page['next_offset']}")


@store_command("list")
def run(args: argparse.Namespace, settings: Settings) -> int:
    found = pages(args, settings)
    if args.json:
        terminal.print_json({"namespaces": found})
    else:
        render(found)
    return 0
