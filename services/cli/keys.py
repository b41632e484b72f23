"""``keymem keys``: the CURVE keys of tcp across hosts (services/keys.py, docs/SCALING.md).

``init`` makes the router's key pair and the ``local`` client key of its own host;
``add-client NAME [--namespaces a,b]`` a key for another host (restricted to those namespaces,
or every one), ``list`` shows who is admitted, ``revoke NAME`` removes a key (a running router
refuses it from its next message on).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from keymem.services import keys
from keymem.services.cli import terminal
from keymem.services.config import configured_home


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("keys", help="CURVE keys for tcp across hosts")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("init", help="create the router's key pair and the local client key")
    add = actions.add_parser("add-client", help="create a client key for another host")
    add.add_argument("name", help="the client's name (lower case, e.g. the host or the team)")
    add.add_argument(
        "--namespaces",
        help="comma-separated namespaces it may use (a trailing * matches a prefix); "
        "without it: every namespace, and it may serve as a worker",
    )
    listing = actions.add_parser("list", help="the admitted client keys")
    terminal.add_json_flag(listing)
    revoke = actions.add_parser("revoke", help="remove a client key")
    revoke.add_argument("name")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    home = configured_home()
    try:
        if args.action == "init":
            created = keys.init(home)
            where = keys.keys_dir(home)
            print(f"{'created' if created else 'kept the'} router keys in {where}")
        elif args.action == "add-client":
            namespaces = None if args.namespaces is None else args.namespaces.split(",")
            entry = keys.add_client(home, args.name, namespaces)
            _print_handover(home, entry)
        elif args.action == "list":
            _list(home, args.json)
        else:
            entry = keys.revoke(home, args.name)
            print(f"revoked {entry.name} ({entry.public})")
    except keys.KeyStoreError as exc:
        print(f"keymem keys: {exc}", file=sys.stderr)
        return 1
    return 0


def _scope(entry: keys.ClientEntry) -> str:
    return "every namespace; may serve" if entry.namespaces is None else ", ".join(entry.namespaces)


def _print_handover(home: Path, entry: keys.ClientEntry) -> None:
    where = keys.keys_dir(home)
    print(f"client {entry.name}: {_scope(entry)}")
    print("on its host, copy into KEYMEM_HOME/keys/ (mode 0600, directory 0700):")
    print(f"  {where / (keys.SERVER_NAME + keys.PUBLIC_SUFFIX)}")
    print(f"  {where / keys.CLIENTS_DIR / (entry.name + keys.SECRET_SUFFIX)}  -> clients/")
    print(f"and set KEYMEM_TRANSPORT=tcp, KEYMEM_TCP_HOST=<router>, KEYMEM_CLIENT_KEY={entry.name}")


def _list(home: Path, as_json: bool) -> None:
    access = keys.read_access(home)
    if as_json:
        terminal.print_json({name: entry.to_json() for name, entry in access.items()})
        return
    grid = terminal.table()
    for column in ("client", "namespaces", "public key"):
        grid.add_column(column, overflow="fold")
    for entry in access.values():
        grid.add_row(entry.name, _scope(entry), entry.public)
    terminal.console().print(grid)
