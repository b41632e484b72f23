"""Inject as the hook calls it, on a deployment freshly loaded with a dev file: the first pass of
its questions against a store no question has searched yet, then a second pass.

    python -m benchmarks.hook_cross_script /work/shared/data/koblex_crosslingual.dev.json \
        --keys title [--passes 2] [--limit N]

One deployment (``keymem up`` in a fresh /tmp home) is loaded through the eval's loader (the
product's ``remember_batch``), which returns once the lexicon has every memory and the idle-time
warm-up has made every memory's vector (its head in the reranker's passage cache). Each question
is then sent as the hook sends it (``shorten``-ed prompt, its namespace, ``retry``) with the
hook's deadline (``KEYMEM_HOOK_TIMEOUT_MS``), no session (a second pass would otherwise hide
what the first showed): its wall time, whether it timed out (the hook then shows nothing), which
services the answer names degraded (a reranker past its share: nothing crosses scripts), and
whether a gold memory was shown; the first question's wall time (a first prompt into the store)
and how many took longer than the reranker's share of the deadline. Per pass also the models
process's CPU (the reranker's time: passages embedded cold) and the box's load.

A question in another script than the memories reads each titled candidate as its writer's name
over its text (``Fusion.cross_named``), a passage the idle-time warm-up did not embed: the first
pass pays for them, the second finds them cached. Run it from a snapshot of another commit (the
working rules' recipe) for the before, alternating.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.deployment import bench_home
from benchmarks.footprint import cpu_s, models_process
from keymem.hooks.prompt_submit import shorten
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.protocol.errors import KeymemError
from keymem.services.config import HOOK_TIMEOUT_MS
from keymem.services.evaluation.dataset import load_benchmark
from keymem.services.evaluation.loader import LoadedStore, load
from keymem.services.evaluation.progress import Progress
from keymem.services.memory.search import RERANK_SHARE

UP_TIMEOUT_S = "900"
LOAD_TIMEOUT_MS = 120_000


def _pct(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 1)


def one_pass(
    client: Client, questions: list[tuple[str, str, frozenset[str]]], store: LoadedStore
) -> list[dict[str, Any]]:
    """Each question once, as the hook asks it: wall ms, timed out, degraded, gold shown."""
    rows = []
    for prompt, namespace, gold in questions:
        body = {"prompt": shorten(prompt), "namespaces": [namespace]}
        started = time.perf_counter()
        try:
            reply = client.call(
                "memory", "inject", body, timeout_ms=HOOK_TIMEOUT_MS.default, retry=True
            )
            error = None
        except KeymemError as exc:
            reply, error = {}, type(exc).__name__
        wall_ms = (time.perf_counter() - started) * 1000
        shown = store.to_benchmark([m["id"] for m in reply.get("memories", [])])
        rows.append(
            {
                "ms": round(wall_ms, 1),
                "error": error,
                "degraded": sorted(reply.get("degraded", {})),
                "gold_shown": bool(gold & set(shown)),
            }
        )
    return rows


def summary(rows: list[dict[str, Any]], models_cpu_s: float, load: float) -> dict[str, Any]:
    walls = [r["ms"] for r in rows]
    answerable = [r for r in rows if r["answerable"]]
    return {
        "questions": len(rows),
        "p50_ms": _pct(walls, 0.5),
        "p95_ms": _pct(walls, 0.95),
        "max_ms": round(max(walls), 1),
        "first_ms": walls[0],
        # past the reranker's share of the deadline (about half: what is left after the graph)
        "over_rerank_share": sum(w > HOOK_TIMEOUT_MS.default * RERANK_SHARE for w in walls),
        "mean_ms": round(statistics.fmean(walls), 1),
        "timed_out": sum(r["error"] is not None for r in rows),
        "degraded": sum(bool(r["degraded"]) for r in rows),
        "degraded_reranker": sum("reranker" in r["degraded"] for r in rows),
        "gold_shown": round(sum(r["gold_shown"] for r in answerable) / max(1, len(answerable)), 3),
        "models_cpu_ms_per_question": round(models_cpu_s * 1000 / len(rows), 1),
        "load_1min": round(load, 2),
    }


def measure(path: Path, keys: str, passes: int, limit: int | None) -> dict[str, Any]:
    benchmark = load_benchmark(path)
    queries = benchmark.queries[:limit] if limit else benchmark.queries
    progress = Progress()
    with bench_home("km-xs-") as deployment:
        deployment.keymem("up", "--timeout", UP_TIMEOUT_S)
        frontend = ipc_endpoints(deployment.home).frontend
        with Client(frontend, timeout_ms=LOAD_TIMEOUT_MS) as client:
            store = load(client, benchmark, keys, progress)  # type: ignore[arg-type]
            models = models_process(deployment)
            questions = [
                (q.query, store.namespaces[i], frozenset(q.gold)) for i, q in enumerate(queries)
            ]
            report: dict[str, Any] = {"file": path.name, "keys": keys, "passes": []}
            for _ in range(passes):
                before = cpu_s(models)
                rows = one_pass(client, questions, store)
                used_s = cpu_s(models) - before
                for row, query in zip(rows, queries, strict=True):
                    row["answerable"] = query.answerable
                report["passes"].append(summary(rows, used_s, os.getloadavg()[0]))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--keys", required=True, help="the eval's key mode (title, provided, auto)")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None, help="the first N questions only")
    args = parser.parse_args(argv)
    report = measure(args.file, args.keys, args.passes, args.limit)
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
