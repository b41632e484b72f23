"""Does sleep lower recall? ``keymem eval``'s keymem row before and after a sleep pass.

    nice -n 10 python -m benchmarks.sleep_eval FILE [FILE ...] [--k 2,5,10] [--json]
        [--in-process]

For each benchmark file (docs/EVAL.md; e.g. /work/shared/data/locomo_agentkeys.dev.json and
hotpot_pooled.dev.json) it starts a throwaway deployment as ``keymem eval`` does (or, with
``--in-process``, the services as threads of this process: on a box too loaded for a
supervised embedder to keep its heartbeats while it embeds the file), loads the file
with its richest keys, scores hybrid recall over every answerable query, runs a sleep pass
through the graph service (the ``sleep`` method ``keymem sleep`` calls), and scores the same
queries again on the same store. The goal (issue 16): every figure after within 0.01 of before,
or better.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.inject_calibration import Placement, deployment
from keymem.protocol.client import Client
from keymem.services.evaluation.dataset import Benchmark, load_benchmark
from keymem.services.evaluation.loader import default_key_mode, load
from keymem.services.evaluation.metrics import ScoreSheet
from keymem.services.evaluation.progress import Progress
from keymem.services.evaluation.recall import KeymemRecall
from keymem.services.evaluation.runner import MethodResult, parse_ks

POLL_INTERVAL_S = 0.5
TOLERANCE = 0.01  # recall may drop at most this much


def score(benchmark: Benchmark, recall: KeymemRecall, ks: tuple[int, ...]) -> dict[str, Any]:
    """keymem eval's keymem row: hybrid recall over every answerable query."""
    result = MethodResult("keymem", ScoreSheet(ks))
    for position, query in enumerate(benchmark.queries):
        if query.answerable:
            result.record(query, recall.search(query.query, recall.store.namespaces[position]))
    return result.sheet.summary().to_dict()


def sleep_now(client: Client) -> dict[str, Any]:
    report: dict[str, Any] = client.call("graph", "sleep", {})
    while report["status"] == "running":
        time.sleep(POLL_INTERVAL_S)
        report = client.call("graph", "sleep_status", {})
    return report


def worst_drop(before: dict[str, Any], after: dict[str, Any]) -> float:
    drops = [before["mrr"] - after["mrr"]]
    for metric in ("recall", "all", "hit"):
        drops += [before[metric][k] - after[metric][k] for k in before[metric]]
    return float(max(drops))


def run_file(path: Path, ks: tuple[int, ...], threads: bool) -> dict[str, Any]:
    benchmark = load_benchmark(path)
    mode = default_key_mode(benchmark)
    progress = Progress(sys.stderr)
    with deployment(progress, Placement(threads)) as (client, _):
        store = load(client, benchmark, mode, progress)
        recall = KeymemRecall(client, store, max(ks))
        before = score(benchmark, recall, ks)
        slept = sleep_now(client)
        after = score(benchmark, recall, ks)
    slept.pop("flags")
    drop = worst_drop(before, after)
    return {
        "file": path.name,
        "keys": mode,
        "before": before,
        "after": after,
        "sleep": slept,
        "worst_drop": round(drop, 4),
        "within_tolerance": drop <= TOLERANCE,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--k", default="2,5,10")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--in-process", action="store_true", help="services as threads")
    args = parser.parse_args()
    results = [run_file(path, parse_ks(args.k), args.in_process) for path in args.files]
    print(json.dumps(results, indent=None if args.json else 2))
    return 0 if all(r["within_tolerance"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
