"""``keymem search QUERY``: hybrid recall as the hook and agents get it, with its evidence.

Without ``--namespace`` it searches what the current directory's scope reads (its project's
namespace and ``default``, services/scope.py), as the hook would here.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from keymem.services.cli import terminal
from keymem.services.cli.store import ask, store_command
from keymem.services.config import Settings
from keymem.services.scope import scope_of

TOP_K_DEFAULT = 8


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("search", help="hybrid recall with each result's evidence")
    parser.add_argument("query", help="what to look for, as a prompt or keywords")
    parser.add_argument(
        "-n",
        "--namespace",
        action="append",
        help="search this namespace (repeatable; default: this directory's project and default)",
    )
    parser.add_argument("--top-k", type=int, default=TOP_K_DEFAULT, help="results per namespace")
    terminal.add_json_flag(parser)
    parser.set_defaults(run=run)


def evidence(memory: dict[str, Any], concepts: dict[str, str]) -> str:
    """Why a memory ranked: the keys it was reached through, its BM25 rank, hops, relevance."""
    parts = memory["components"]
    found = []
    keys = [concepts.get(key_id, key_id) for key_id in memory.get("matched_keys", [])]
    if keys:
        found.append("keys " + ", ".join(keys))
    if parts.get("bm25_rank"):
        found.append(f"words #{parts['bm25_rank']}")
    if parts.get("hop"):
        found.append(f"hop {parts['hop']}")
    if "rerank_score" in memory:
        found.append(f"relevance {memory['rerank_score']:.2f}")
    return "; ".join(found) or "-"


def render(replies: list[dict[str, Any]]) -> None:
    out = terminal.console()
    for reply in replies:
        title = f"{reply['namespace']}: {len(reply['memories'])} found"
        if reply.get("degraded"):
            title += " (without " + ", ".join(sorted(reply["degraded"])) + ")"
        grid = terminal.table(title, expand=True)
        grid.add_column("score", no_wrap=True, justify="right")
        grid.add_column("id", no_wrap=True)
        grid.add_column("memory", overflow="fold", ratio=3)
        grid.add_column("evidence", overflow="fold", ratio=2)
        concepts = {k["key_id"]: k["concept"] for k in reply["keys"]}
        for memory in reply["memories"]:
            grid.add_row(
                f"{memory['score']:.3f}",
                memory["memory_id"],
                terminal.one_line(memory["content"]),
                evidence(memory, concepts),
            )
        out.print(grid)


@store_command("search")
def run(args: argparse.Namespace, settings: Settings) -> int:
    spaces = args.namespace or scope_of(os.getcwd(), settings.home).namespaces
    replies = [
        ask(
            settings,
            "memory",
            "search",
            {"query": args.query, "namespace": space, "top_k": args.top_k},
        )
        for space in dict.fromkeys(spaces)
    ]
    if args.json:
        terminal.print_json({"query": args.query, "results": replies})
    else:
        render(replies)
    return 0
