"""``keymem namespaces``: the namespaces in the store and the mapping in force here;
``keymem namespaces drop NS``: preview what dropping one deletes, and with ``--yes`` do it."""

from __future__ import annotations

import argparse
import os
from typing import Any

from keymem.services.cli import terminal
from keymem.services.cli.store import StoreError, ask, counts, store_command
from keymem.services.config import Settings
from keymem.services.scope import read_mapping, scope_of

COUNTED = ("memories", "versions", "keys", "links")


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "namespaces", help="list namespaces and the project mapping in force; drop one"
    )
    terminal.add_json_flag(parser)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    drop = actions.add_parser("drop", help="delete a namespace whole (previews without --yes)")
    drop.add_argument("namespace", help="the namespace to delete")
    drop.add_argument("--yes", action="store_true", help="really delete it")
    terminal.add_json_flag(drop)
    parser.set_defaults(run=run)


def collect(settings: Settings) -> dict[str, Any]:
    scope = scope_of(os.getcwd(), settings.home)
    spaces = counts(settings)["namespaces"]
    if scope.project and scope.project not in spaces:
        spaces[scope.project] = dict.fromkeys(COUNTED, 0)
    return {
        "namespaces": dict(sorted(spaces.items())),
        "scope": {**scope._asdict(), "searched": scope.namespaces},
        "mapping": read_mapping(settings.home),
    }


def render(report: dict[str, Any]) -> None:
    scope, mapping = report["scope"], report["mapping"]
    mapped_from: dict[str, list[str]] = {}
    for prefix, ns in mapping.items():
        mapped_from.setdefault(ns, []).append(prefix)
    grid = terminal.table()
    for column in ("namespace", "memories", "keys", "mapped from"):
        grid.add_column(column, overflow="fold", justify="right" if column in COUNTED else "left")
    for ns, row in report["namespaces"].items():
        origins = mapped_from.get(ns, [])
        if ns == scope["project"] and scope["source"] != "namespaces.json":
            origins = [*origins, f"git root {scope['root']}"]
        name = ns + (" (here)" if ns == scope["project"] else "")
        grid.add_row(name, str(row["memories"]), str(row["keys"]), ", ".join(origins) or "-")
    out = terminal.console()
    out.print(grid)
    out.print()
    if scope["project"]:
        origin = f"{scope['source']} {scope['root']}"
        out.print(f"Here ({scope['cwd']}): project {scope['project']!r}, from {origin}.")
    else:
        out.print(f"Here ({scope['cwd']}): no project (no mapping, not in a git repository).")
    out.print(f"The hook and recall search: {', '.join(scope['searched'])}.", overflow="fold")


def drop(args: argparse.Namespace, settings: Settings) -> int:
    found = ask(settings, "memory", "counts", {"namespace": args.namespace})
    ((namespace, row),) = found["namespaces"].items()
    if not any(row[name] for name in COUNTED):
        raise StoreError(f"there is no namespace {namespace!r} (keymem namespaces lists them)")
    what = (
        f"{row['memories']} memories ({row['versions']} versions), {row['keys']} keys and "
        f"{row['links']} links"
    )
    if not args.yes:
        if args.json:
            terminal.print_json({"namespace": namespace, "dropped": False, "would_delete": row})
        else:
            print(f"Dropping {namespace!r} would delete {what}. Nothing was changed.")
            print(f"To delete it: keymem namespaces drop {namespace} --yes")
        return 1
    done = ask(settings, "graph", "drop_namespace", {"namespace": namespace})
    if args.json:
        terminal.print_json({"namespace": namespace, "dropped": True, "deleted": row, **done})
    else:
        print(f"Dropped {namespace!r}: {what}.")
    return 0


@store_command("namespaces")
def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.action == "drop":
        return drop(args, settings)
    report = collect(settings)
    if args.json:
        terminal.print_json(report)
    else:
        render(report)
    return 0
