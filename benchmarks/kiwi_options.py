"""Kiwi's load options: the CPU each costs at start, and whether its tokens equal the shipped ones.

The lexicon's start is Kiwi's constructor and first call (services/lexicon/tokenizer.py). Each
measurement runs in a process of its own: the CPU seconds of the constructor and of the first
call (median of ``--rounds``, the option sets interleaved so they share the machine's load),
then once Kiwi's tokens (form, tag, position) of every Korean text of the dev data, compared
with the shipped options' (``load_multi_dict=False``). Texts without Hangul never reach Kiwi.

    python -m benchmarks.kiwi_options [--data ../shared/data] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SHIPPED: dict[str, Any] = {"load_multi_dict": False}
VARIANTS: dict[str, dict[str, Any]] = {
    "shipped": SHIPPED,
    "typo dictionary off": {**SHIPPED, "load_typo_dict": False},
    "one worker thread": {**SHIPPED, "num_workers": 1},
    "default dictionary off": {**SHIPPED, "load_default_dict": False},
}
HANGUL = re.compile("[\uac00-\ud7a3]")
WARM_TEXT = "사용자는 어제 부산에서 회의를 했다 (keymem 3.11.2, 東京)"


def korean_texts(data: Path) -> list[str]:
    texts = []
    for path in sorted(data.glob("*.dev.json")):
        document = json.loads(path.read_text())
        for memory in document["memories"]:
            texts += [memory["content"], memory.get("title") or ""]
        texts += [query["query"] for query in document["queries"]]
    return [t for t in texts if HANGUL.search(t)]


def run_variant(options: dict[str, Any], data: Path | None) -> dict[str, Any]:
    """In this process: the CPU of Kiwi's constructor and first call, and (given the data) its
    tokens of the data's Korean texts."""
    from kiwipiepy import Kiwi

    started = time.process_time()
    kiwi = Kiwi(**options)
    built = time.process_time()
    kiwi.tokenize(WARM_TEXT)
    warmed = time.process_time()
    tokens = [
        [[t.form, str(t.tag), t.start, t.len] for t in kiwi.tokenize(text)]
        for text in (korean_texts(data) if data else [])
    ]
    return {"build_s": built - started, "warm_s": warmed - built, "tokens": tokens}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # one variant, in a child process
    parser.add_argument("--tokens", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.variant:
        print(json.dumps(run_variant(VARIANTS[args.variant], args.data if args.tokens else None)))
        return 0

    def child(name: str, *extra: str) -> dict[str, Any]:
        command = [sys.executable, "-m", "benchmarks.kiwi_options", "--data", str(args.data)]
        out = subprocess.run([*command, "--variant", name, *extra], capture_output=True, check=True)
        found: dict[str, Any] = json.loads(out.stdout)
        return found

    timings: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):
        for name in VARIANTS:
            timings[name].append(child(name))
    results = {name: child(name, "--tokens") for name in VARIANTS}
    shipped = results["shipped"]["tokens"]
    print(f"{len(shipped)} Korean texts from {args.data}")
    print(f"CPU medians of {args.rounds} rounds")
    print("| options | constructor CPU s | first call CPU s | texts whose tokens differ |")
    print("|---|---|---|---|")
    for name, found in results.items():
        differ = sum(a != b for a, b in zip(found["tokens"], shipped, strict=True))
        build_s = statistics.median(t["build_s"] for t in timings[name])
        warm_s = statistics.median(t["warm_s"] for t in timings[name])
        print(f"| {name} | {build_s:.2f} | {warm_s:.2f} | {differ} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
