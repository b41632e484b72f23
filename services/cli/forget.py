"""``keymem forget ID...``: delete memories for good (with the versions they superseded).

Every id is found first; if one is unknown nothing is deleted.
"""

from __future__ import annotations

import argparse
from typing import Any

from keymem.services.cli import terminal
from keymem.services.cli.store import ask, locate, store_command, unknown
from keymem.services.config import Settings


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("forget", help="delete memories by id")
    parser.add_argument("ids", nargs="+", metavar="ID", help="memory ids")
    parser.add_argument("-n", "--namespace", help="their namespace (default: look in every one)")
    terminal.add_json_flag(parser)
    parser.set_defaults(run=run)


@store_command("forget")
def run(args: argparse.Namespace, settings: Settings) -> int:
    ids = list(dict.fromkeys(args.ids))
    where = locate(settings, ids, args.namespace)
    if len(where) < len(ids):
        raise unknown(ids, where, args.namespace)
    deleted: dict[str, list[str]] = {}
    for memory_id in ids:
        if any(memory_id in gone for gone in deleted.values()):
            continue  # an older version that a newer one's forget already took
        body = {"memory_id": memory_id, "namespace": where[memory_id]}
        deleted[memory_id] = ask(settings, "memory", "forget", body)["deleted"]
    if args.json:
        terminal.print_json({"deleted": deleted})
        return 0
    for memory_id, gone in deleted.items():
        older = len(gone) - 1
        suffix = f" and {older} older version(s)" if older else ""
        print(f"forgot {memory_id} in {where[memory_id]!r}{suffix}")
    return 0
