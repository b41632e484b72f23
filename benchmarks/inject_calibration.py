"""Inject calibration: one load per file, every query through ``memory.inject`` under each gate.

    python -m benchmarks.inject_calibration FILE [FILE ...] [--variants a,b,...] [--limit N]

Inject is what the hook shows unasked, so it must stay silent when the store does not hold the
answer (``gold: []`` queries: the not-found rate) and still show a gold memory when it does.
A variant is a ``gate`` override of ``services.memory.inject.Gate`` (thresholds and switches);
each costs one pass over the queries against the same loaded store, so the trade-off between
the two rates can be read off one table. The file's queries are scored with the eval's own
tally (``services.evaluation.runner.InjectResult``), so "shipped" matches ``keymem eval``.

Settings that win here must win on several files (issue 8: no per-dataset switches).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError
from keymem.services.evaluation.dataset import Benchmark, load_benchmark
from keymem.services.evaluation.deployment import temporary_deployment
from keymem.services.evaluation.loader import LoadedStore, default_key_mode, load
from keymem.services.evaluation.progress import Progress
from keymem.services.evaluation.recall import KeymemRecall, memory_ids
from keymem.services.evaluation.runner import InjectResult
from keymem.services.memory.inject import COVERAGE_MAX

CLIENT_TIMEOUT_MS = 30_000
QUERY_TIMEOUT_MS = 30_000
NEVER = COVERAGE_MAX  # a coverage no memory reaches: switches the word-only admission off

# Before calibration: graph connection and the 0.3 cosine floor only.
LEGACY = {"min_coverage": 0.0, "strong_coverage": NEVER, "entities": False, "premise": False}
VARIANTS: dict[str, dict[str, Any]] = {
    "shipped": {},
    "legacy": LEGACY,
    "no_entities": {"entities": False},
    "no_premise": {"premise": False},
    "no_coverage": {"min_coverage": 0.0},
    "coverage_0.1": {"min_coverage": 0.1},
    "coverage_0.3": {"min_coverage": 0.3},
    "coverage_0.4": {"min_coverage": 0.4},
    "no_word_only": {"strong_coverage": NEVER},
    "word_only_0.5": {"strong_coverage": 0.5},
    "word_only_0.8": {"strong_coverage": 0.8},
    "floor_0.2": {"min_relevance": 0.2},
    "floor_0.4": {"min_relevance": 0.4},
    "strong_0.5": {"strong_relevance": 0.5},
}


def run_variants(
    client: Client,
    benchmark: Benchmark,
    store: LoadedStore,
    variants: Mapping[str, Mapping[str, Any]],
    progress: Progress,
) -> dict[str, InjectResult]:
    unanswerable = sum(1 for q in benchmark.queries if not q.answerable)
    results = {name: InjectResult(unanswerable) for name in variants}
    queries = list(enumerate(benchmark.queries))
    KeymemRecall(client, store, 1).warm_up(benchmark.queries[0].query, store.namespaces[0])
    for position, query in progress.over(queries, "keymem: inject variants"):
        for name, gate in variants.items():
            body = {"prompt": query.query, "namespace": store.namespaces[position], "gate": gate}
            try:
                reply = client.call("memory", "inject", body, timeout_ms=QUERY_TIMEOUT_MS)
                results[name].record(query, store.to_benchmark(memory_ids(reply)))
            except KeymemError as exc:
                progress.note(f"{name}: {exc}")
                if query.answerable:
                    results[name].record(query, [])
                else:
                    results[name].errors += 1
    return results


def _share(hits: int, asked: int) -> str:
    return f"{hits / asked:.3f}" if asked else "n/a"


def table(results: Mapping[str, InjectResult]) -> str:
    types = sorted({t for r in results.values() for t in r.answered})
    head = ["not-found", "gold shown", *(f"{t} gold shown" for t in types)]
    lines = ["| variant | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
    for name, result in results.items():
        rate = result.rate
        cells = ["n/a" if rate is None else f"{rate:.3f}", _share(*result.gold_shown())]
        cells += [_share(*result.gold_shown(t)) for t in types]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def calibrate(path: Path, names: Sequence[str], limit: int | None) -> str:
    benchmark = load_benchmark(path)
    if limit:
        benchmark = benchmark.limited(limit)
    progress = Progress(sys.stderr)
    started = time.monotonic()
    mode = default_key_mode(benchmark)
    with (
        temporary_deployment(progress.note) as settings,
        Client(settings.endpoints.frontend, timeout_ms=CLIENT_TIMEOUT_MS) as client,
    ):
        store = load(client, benchmark, mode, progress)
        results = run_variants(client, benchmark, store, {n: VARIANTS[n] for n in names}, progress)
    unanswerable = sum(1 for q in benchmark.queries if not q.answerable)
    return (
        f"## {path.name} (--keys {mode}; {len(benchmark.queries) - unanswerable} answerable, "
        f"{unanswerable} with gold: []; wall {time.monotonic() - started:.0f} s)\n" + table(results)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", type=Path, nargs="+")
    parser.add_argument("--variants", help=f"comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--limit", type=int)
    args = parser.parse_args(argv)
    names = args.variants.split(",") if args.variants else list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    for path in args.files:
        print(calibrate(path, names, args.limit), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
