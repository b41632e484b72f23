"""``keymem config``: the effective settings and where each came from."""

from __future__ import annotations

import argparse
import json
from typing import Any

from keymem.services.config import SOURCE_DEFAULT, Value, load


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "config", help="show the effective settings and where each came from"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(run=run)


def public_text(value: Value) -> str:
    """The value as the environment spells it ("" unset), a secret's only as set."""
    return "(set, hidden)" if value.setting.secret and value.text else value.text


def run(args: argparse.Namespace) -> int:
    config = load()
    if args.json:
        rows = [
            {
                "name": name,
                "file_key": value.setting.file_key if value.setting.in_file else None,
                "value": public_text(value),
                "source": value.source,
                "read_by": list(value.setting.read_by),
            }
            for name, value in config.values.items()
        ]
        print(json.dumps({"file": str(config.file) if config.file else None, "settings": rows}))
        return 0
    print(f"config file: {config.file or '(none: keymem.toml or config.toml in KEYMEM_HOME)'}")
    width = max(len(name) for name in config.values)
    for name, value in config.values.items():
        source = "" if value.source == SOURCE_DEFAULT else f"  [{value.source}]"
        print(f"{name:<{width}}  {public_text(value) or '(unset)'}{source}")
    return 0
