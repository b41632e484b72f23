"""``keymem show ID``: one memory whole — text, keys, validity, source and its versions."""

from __future__ import annotations

import argparse
from typing import Any

from keymem.services.cli import terminal
from keymem.services.cli.store import ask, locate, store_command, unknown
from keymem.services.config import Settings


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("show", help="show one memory with its keys and versions")
    parser.add_argument("id", help="a memory id (as list, search or an agent shows it)")
    parser.add_argument("-n", "--namespace", help="its namespace (default: look in every one)")
    terminal.add_json_flag(parser)
    parser.set_defaults(run=run)


def fetch(settings: Settings, memory_id: str, namespace: str | None) -> dict[str, Any]:
    where = locate(settings, [memory_id], namespace)
    if memory_id not in where:
        raise unknown([memory_id], where, namespace)
    scope = {"namespace": where[memory_id]}
    body = {"ids": [memory_id], "include_inactive": True, **scope}
    (memory,) = ask(settings, "memory", "get_memories", body)["memories"]
    chain = ask(settings, "memory", "history", {"memory_id": memory_id, **scope})
    return {"memory": memory, "history": chain}


def render(found: dict[str, Any]) -> None:
    memory, chain = found["memory"], found["history"]
    validity = memory["validity"]
    out = terminal.console()
    facts = terminal.table(header=False)
    facts.add_column("", no_wrap=True, style="bold")
    facts.add_column("", overflow="fold")
    for name, value in (
        ("id", memory["id"]),
        ("namespace", memory["namespace"]),
        ("saved", terminal.when(memory["created_at"])),
        ("state", "current" if memory["active"] else f"superseded by {memory['superseded_by']}"),
        (
            "validity",
            f"{validity['status']}, freshness {validity['freshness']}, "
            f"{validity['age_days']:.0f} days since confirmed, {validity['decay_profile']}",
        ),
        ("depth", f"{memory['depth']} ({memory['access_count']} reads)"),
        ("source", ", ".join(f"{k}={v}" for k, v in (memory["source"] or {}).items()) or "-"),
        ("related", ", ".join(memory["related_to"]) or "-"),
    ):
        facts.add_row(name, str(value))
    out.print(facts)
    out.print()
    out.print(memory["content"], overflow="fold")
    keys = terminal.table("keys")
    for column in ("key", "type", "link", "memories", "id"):
        keys.add_column(column, overflow="fold")
    for key in memory["keys"]:
        keys.add_row(
            key["concept"] + (" (hub)" if key["is_hub"] else ""),
            key["key_type"],
            f"{key['link_weight']:.2f}",
            str(key["memory_count"]),
            key["key_id"],
        )
    out.print()
    out.print(keys)
    if len(chain["versions"]) > 1:
        versions = terminal.table("versions, oldest first")
        for column in ("id", "saved", "text"):
            versions.add_column(column, overflow="fold")
        for version in chain["versions"]:
            marker = " *" if version["id"] == memory["id"] else ""
            versions.add_row(
                version["id"] + marker,
                terminal.when(version["created_at"]),
                terminal.one_line(version["content"]),
            )
        out.print()
        out.print(versions)


@store_command("show")
def run(args: argparse.Namespace, settings: Settings) -> int:
    found = fetch(settings, args.id, args.namespace)
    if args.json:
        terminal.print_json(found)
    else:
        render(found)
    return 0
