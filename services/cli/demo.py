"""``keymem demo``: the product working in a few seconds, before it is wired into an agent.

It starts the services if needed, saves the Newton → apple → fruit → strawberry story in
English and Korean in its own namespace, and shows the three ways an agent meets it: the key
walk an MCP agent takes, a hybrid recall with hops, and exactly what the hook would inject.
Saving the same text again supersedes the earlier copy (exact dedup), so it can be rerun.
It writes into the user's own store (KEYMEM_HOME, or ``--home``), in the ``demo`` namespace
only, and says so; ``keymem demo --clean`` drops exactly that namespace.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import Any

from keymem.hooks.prompt_submit import render
from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError
from keymem.services.cli import up
from keymem.services.config import Settings

NAMESPACE = "demo"
STORY = [
    ("Newton discovered gravity when an apple fell from a tree", ["Newton", "apple", "gravity"]),
    ("Apples are a fruit; the user eats one most mornings", ["apple", "fruit", "breakfast"]),
    (
        "The user likes strawberries more than any other fruit",
        ["strawberry", "fruit", "user taste"],
    ),
    ("뉴턴은 사과가 떨어지는 것을 보고 중력을 발견했다", ["뉴턴", "사과", "중력"]),
    ("사과는 과일이고, 사용자는 딸기를 가장 좋아한다", ["사과", "과일", "딸기"]),
]
HOOK_PROMPT = "I'm at the market. What fruit should I buy for the user?"
WIDTH = 92


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("demo", help="show keymem's associative recall on a tiny story")
    parser.add_argument(
        "--clean", action="store_true", help=f"remove the demo's namespace ('{NAMESPACE}') only"
    )
    parser.set_defaults(run=run)


def say(text: str = "", indent: int = 0) -> None:
    prefix = " " * indent
    print(
        textwrap.fill(text, WIDTH, initial_indent=prefix, subsequent_indent=prefix) if text else ""
    )


def title(text: str) -> None:
    print(f"\n== {text} " + "=" * max(0, WIDTH - len(text) - 4))


def walk(client: Client) -> None:
    title('1. The key walk an agent takes: recall("Newton") → read_key → read_memory')
    found = client.call("memory", "recall", {"query": "Newton", "namespace": NAMESPACE})
    keys = ", ".join(f"{k['concept']} ({k['match_type']} {k['score']:.2f})" for k in found["keys"])
    say(f'recall("Newton") → keys: {keys}')
    preview = found["memories"][0]
    say(f'passive preview: "{preview["content"]}"', 2)
    apple = next(k for k in preview["connected_keys"] if k["concept"] == "apple")
    say(f"connected keys: {', '.join(k['concept'] for k in preview['connected_keys'])}", 2)
    handles = client.call(
        "memory",
        "read_key",
        {"key_id": apple["key_id"], "query": "what is it", "namespace": NAMESPACE},
    )["memories"]
    other = next(h for h in handles if h["memory_id"] != preview["id"])
    memory = client.call(
        "memory",
        "read_memory",
        {"memory_id": other["memory_id"], "via_key_id": apple["key_id"], "namespace": NAMESPACE},
    )["memory"]
    say(f'read_key(apple) → read_memory → "{memory["content"]}"')
    fruit = next(k for k in memory["keys"] if k["concept"] == "fruit")
    members = client.call(
        "memory", "read_key", {"key_id": fruit["key_id"], "namespace": NAMESPACE}
    )["memories"]
    strawberry = client.call(
        "memory",
        "get_memories",
        {"ids": [h["memory_id"] for h in members], "namespace": NAMESPACE},
    )["memories"]
    liked = next(m for m in strawberry if "strawberr" in m["content"])
    say(f'read_key(fruit) → "{liked["content"]}"')
    say(
        "Newton → apple → fruit → strawberry: no embedding connects the two ends; shared keys do.",
        2,
    )


def hybrid(client: Client) -> None:
    title('2. Hybrid recall with hops: search("Newton", hops=2)')
    for query in ("Newton", "뉴턴"):
        result = client.call(
            "memory", "search", {"query": query, "namespace": NAMESPACE, "top_k": 6, "timing": True}
        )
        say(f"{query}  ({result['timing_ms']['total']:.0f} ms)")
        for rank, m in enumerate(result["memories"], 1):
            parts = m["components"]
            how = f"hop {parts['hop']} via a shared key" if parts["hop"] else "direct"
            say(f"{rank}. [{how}] {m['content']}", 3)


def hook(client: Client) -> None:
    title("3. What the prompt-submit hook would inject")
    say(f'prompt: "{HOOK_PROMPT}"')
    injected = client.call("memory", "inject", {"prompt": HOOK_PROMPT, "namespaces": [NAMESPACE]})[
        "memories"
    ]
    print(textwrap.indent(render(injected) if injected else "(nothing: no relevant memory)", "  "))
    unrelated = "How do I rotate TLS certificates in nginx?"
    nothing = client.call("memory", "inject", {"prompt": unrelated, "namespaces": [NAMESPACE]})
    say(f'prompt: "{unrelated}" → {len(nothing["memories"])} memories (it stays silent)')


def clean(client: Client) -> None:
    dropped = client.call("graph", "drop_namespace", {"namespace": NAMESPACE})
    print(
        f"Removed the demo's namespace '{NAMESPACE}': {dropped['versions']} memory versions, "
        f"{dropped['keys']} keys. Nothing else was touched."
    )


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    code = up.run(argparse.Namespace(timeout=None, restart=False))
    if code != 0:
        return code
    try:
        with Client(settings.endpoints.frontend, timeout_ms=30_000) as client:
            if args.clean:
                clean(client)
                return 0
            print(
                f"The demo writes into your store at {settings.home}, in namespace "
                f"'{NAMESPACE}' only; `keymem demo --clean` removes exactly that namespace."
            )
            title(f"Saving a small bilingual story in namespace '{NAMESPACE}'")
            result = client.call(
                "memory",
                "remember_batch",
                {"items": [{"content": c, "keys": k, "namespace": NAMESPACE} for c, k in STORY]},
            )
            for (content, keys), saved in zip(STORY, result["results"], strict=True):
                say(f"{saved['saved']}  {content}  keys={keys}", 2)
            client.call(
                "lexicon",
                "search",
                {"query": "Newton", "namespace": NAMESPACE, "min_seq": result["seq"]},
            )
            walk(client)
            hybrid(client)
            hook(client)
    except KeymemError as exc:
        print(f"keymem demo: {exc}", file=sys.stderr)
        return 1
    print(
        f"\nServices keep running (keymem status; keymem down). Home: {settings.home}\n"
        f"The story stays in namespace '{NAMESPACE}' until `keymem demo --clean`.\n"
        f"Walk it in a browser: `keymem ui` (namespace '{NAMESPACE}')."
    )
    return 0
