"""Read your writes through a real supervised deployment: how many immediate reads find a write.

    python -m benchmarks.read_your_writes [--rounds 100] [--json]

Starts a throwaway deployment (``keymem up`` in a short temporary home), then per round
remembers a fact whose only distinctive word is a fresh nonce that no key names, and at once —
no ``seq`` passed, as an agent or the hook would ask — sends ``memory.search``, the MCP-level
``memory.recall`` and ``memory.inject`` for that word. A read finds the write when the new
memory is among its answers (recall: a key lent by the memory's text, ``match_type``
content). For comparison it also asks the lexicon itself right after each write, without
``min_seq``: how often the change feed alone had caught up.
"""

from __future__ import annotations

import argparse
import json
import secrets
import time
from typing import Any

from benchmarks.deployment import bench_home
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints

NAMESPACE = "read-your-writes"
CALL_TIMEOUT_MS = 10_000
KEYS = ["delivery", "courier", "bakery door"]  # three agent keys: no auto-keys


def one_round(client: Client) -> dict[str, bool]:
    word = f"zq{secrets.token_hex(4)}"
    saved = client.call(
        "memory",
        "remember",
        {
            "content": f"The courier left parcel {word} at the blue door of the bakery",
            "keys": KEYS,
            "namespace": NAMESPACE,
        },
        timeout_ms=CALL_TIMEOUT_MS,
    )["saved"]
    lexicon = client.call(
        "lexicon", "search", {"query": word, "namespace": NAMESPACE}, timeout_ms=CALL_TIMEOUT_MS
    )
    searched = client.call(
        "memory", "search", {"query": word, "namespace": NAMESPACE}, timeout_ms=CALL_TIMEOUT_MS
    )
    recalled = client.call(
        "memory", "recall", {"query": word, "namespace": NAMESPACE}, timeout_ms=CALL_TIMEOUT_MS
    )
    injected = client.call(
        "memory",
        "inject",
        {"prompt": f"where did the courier leave parcel {word}?", "namespaces": [NAMESPACE]},
        timeout_ms=CALL_TIMEOUT_MS,
    )
    return {
        "lexicon_alone": saved in [h["id"] for h in lexicon["hits"]],
        "search": saved in [m["memory_id"] for m in searched["memories"]],
        "recall": any(k["match_type"] == "content" for k in recalled["keys"]),
        "inject": saved in [m["id"] for m in injected["memories"]],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with bench_home("km-ryw-") as deployment:
        deployment.keymem("up", "--timeout", "600")
        found: dict[str, int] = {}
        started = time.perf_counter()
        with Client(ipc_endpoints(deployment.home).frontend) as client:
            for _ in range(args.rounds):
                for read, hit in one_round(client).items():
                    found[read] = found.get(read, 0) + hit
        report: dict[str, Any] = {
            "rounds": args.rounds,
            "found": found,
            "seconds": round(time.perf_counter() - started, 1),
        }
    if args.json:
        print(json.dumps(report))
    else:
        for read, hits in found.items():
            print(f"{read:14} {hits} of {args.rounds}")
        print(f"{report['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
