"""The ``keymem`` command: one module per subcommand."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

from keymem.protocol.endpoints import make_private
from keymem.services.cli import (
    backup,
    bench,
    config,
    demo,
    doctor,
    down,
    export,
    forget,
    import_,
    install,
    keys,
    list_,
    mcp,
    migrate,
    namespaces,
    report,
    search,
    show,
    sleep,
    stats,
    status,
    ui,
    up,
    worker,
)
from keymem.services.cli import eval as eval_
from keymem.services.config import EXIT_CLI_CONFIG, ConfigError, use_home

COMMANDS = (
    up,
    down,
    status,
    list_,
    show,
    search,
    forget,
    stats,
    namespaces,
    report,
    config,
    demo,
    doctor,
    install,
    mcp,
    bench,
    migrate,
    backup,
    sleep,
    export,
    import_,
    eval_,
    ui,
    keys,
    worker,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keymem", description="Associative memory for LLM agents: supervised services."
    )
    parser.add_argument("--version", action="version", version=f"keymem {version('keymem')}")
    parser.add_argument(
        "--home", type=Path, help="KEYMEM_HOME for this command and the services it starts"
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    make_private()
    args = build_parser().parse_args(argv)
    if args.home is not None:
        use_home(args.home)
    try:
        code: int = args.run(args)
    except ConfigError as exc:
        print(f"keymem: configuration error: {exc}", file=sys.stderr)
        return EXIT_CLI_CONFIG
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
