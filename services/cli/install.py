"""``keymem install HOST``: this installation's keymem in an agent host's configuration.

It writes the MCP server and, for Claude Code and Codex, the UserPromptSubmit and SessionStart
hooks with this environment's absolute commands, so a host started outside the shell that
installed keymem (a desktop launcher, another PATH) still finds them (hosts.py says where and
what). Every file is read and checked before any is written: a file the host could not read
either is refused with the reason and nothing changes. Running it again changes nothing; a file
it rewrites is first copied beside itself; ``--uninstall`` removes keymem's entries and keeps
the rest; ``--print`` shows the entries and touches nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from keymem.services.cli.hosts import (
    HOST_NAMES,
    Document,
    HostConfigError,
    HostFile,
    hosts,
    this_installation,
)
from keymem.services.config import load

BACKUP_STAMP = "%Y%m%d-%H%M%S"


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "install", help="put keymem into an agent host's config, with this install's paths"
    )
    parser.add_argument("host", choices=HOST_NAMES)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--print",
        action="store_true",
        dest="print_only",
        help="print what would be written, change nothing",
    )
    mode.add_argument(
        "--uninstall", action="store_true", help="remove keymem's entries, keep everything else"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    config = load()
    host = hosts(config)[args.host]
    installation = this_installation(config)
    if args.print_only:
        for host_file in host.files:
            document = host_file.empty()
            host_file.install(document, installation)
            print(f"# {host_file.path}\n{host_file.dump(document)}")
        return 0
    edits: list[tuple[HostFile, Document]] = []
    try:
        for host_file in host.files:
            document = host_file.load()
            before = host_file.plain(document)
            if args.uninstall:
                host_file.uninstall(document)
            else:
                host_file.install(document, installation)
            if host_file.plain(document) != before:
                edits.append((host_file, document))
    except HostConfigError as exc:
        print(f"keymem install: {exc}; nothing was changed", file=sys.stderr)
        return 1
    for host_file in host.files:
        if all(edited is not host_file for edited, _ in edits):
            print(f"unchanged {host_file.path}")
    for host_file, document in edits:
        try:
            backup = write(host_file.path, host_file.dump(document))
        except OSError as exc:
            print(f"keymem install: {host_file.path}: {exc}", file=sys.stderr)
            return 1
        kept = f" (the previous file: {backup})" if backup else ""
        print(f"{'removed keymem from' if args.uninstall else 'wrote'} {host_file.path}{kept}")
    if edits and not args.uninstall:
        print(f"next: {host.next_step}")
    return 0


def write(path: Path, text: str) -> Path | None:
    """Replace the file atomically, keeping its mode, after copying it aside; a symlinked file
    (a dotfiles checkout) is written through its link. Returns the copy, if there was a file."""
    target = path.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    backup = None
    mode = None
    if target.exists():
        backup = backup_path(target)
        shutil.copy2(target, backup)
        mode = stat.S_IMODE(target.stat().st_mode)
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return backup


def backup_path(target: Path) -> Path:
    stamp = time.strftime(BACKUP_STAMP)
    candidate = target.with_name(f"{target.name}.keymem-{stamp}.bak")
    number = 1
    while candidate.exists():
        number += 1
        candidate = target.with_name(f"{target.name}.keymem-{stamp}-{number}.bak")
    return candidate
