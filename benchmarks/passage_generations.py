"""The reranker's passage store under an eval's query mix: how much of a generation the queries
read (what outlives the generation's end), and what a scoring call costs read from each place.

    python -m benchmarks.passage_generations FILE [--limit N]

In process (``recall_ablation.in_process``) in a temporary home: load FILE, warm every
memory's head (as the write path's warm-up does), then search every answerable query once as
shipped, recording each scoring call the reranker gets and every text it reads. Reported:

- ``rows``: the store's rows after the pass (every head, and the windows and ``about`` texts
  the queries read); ``read``: the distinct texts the queries read; their share of the rows,
  and of the heads (what a generation's end keeps of a store that saw only this query mix);
- CPU of the recorded calls in order (process time: the first, the first ten's mean, the
  p50, the total) with an empty LRU, as a worker after a restart: every row in the current
  generation; every row in the previous one (a generation ended since: each read also copies
  its row forward); cold (ended twice with nothing read: every row embedded, as without a
  store).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.recall_ablation import BASE_BODY, KS, _answerable, in_process
from keymem.protocol.errors import KeymemError
from keymem.services.evaluation.dataset import load_benchmark
from keymem.services.evaluation.loader import default_key_mode
from keymem.services.evaluation.loader import load as load_store
from keymem.services.evaluation.progress import Progress
from keymem.services.memory.search import Fusion, Search
from keymem.services.reranker import passages
from keymem.services.reranker.passages import PassageStore
from keymem.services.reranker.scorers import EmbeddingCosineScorer, cosine_head, read_windows
from keymem.services.reranker.settings import DEFAULT_CACHE_ENTRIES

Call = tuple[str, list[str]]


def cpu_per_call(calls: list[Call], make: Callable[[], EmbeddingCosineScorer]) -> dict[str, Any]:
    scorer = make()
    cpu_ms = []
    for query, texts in calls:
        scorer.backend.encode([query], "query")  # the query's vector is not the store's
        started = time.process_time()
        scorer.score(query, texts)
        cpu_ms.append((time.process_time() - started) * 1000)
    if scorer.store is not None:
        scorer.store.close()
    return {
        "first_call_cpu_ms": round(cpu_ms[0], 1),
        "first_10_mean_ms": round(statistics.fmean(cpu_ms[:10]), 1),
        "cpu_ms_p50": round(statistics.median(cpu_ms), 2),
        "total_cpu_s": round(sum(cpu_ms) / 1000, 2),
    }


def end_generation(directory: Path, dim: int) -> None:
    """End the current generation now, as its age would."""
    aged = passages.GENERATION_MAX_AGE_S
    passages.GENERATION_MAX_AGE_S = -aged  # every generation old, even one numbered ahead
    try:
        PassageStore(directory, dim, DEFAULT_CACHE_ENTRIES).close()
    finally:
        passages.GENERATION_MAX_AGE_S = aged


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--limit", type=int)
    args = parser.parse_args()
    benchmark = load_benchmark(args.file)
    if args.limit:
        benchmark = benchmark.limited(args.limit)
    progress = Progress(sys.stderr)
    calls: list[Call] = []
    read: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="km-gen-") as home:
        with in_process(Path(home)) as running:
            loaded = load_store(running.client, benchmark, default_key_mode(benchmark), progress)
            running.warm([m.content for m in benchmark.memories], progress, None)
            scorer = running.scorers["configured"]
            assert isinstance(scorer, EmbeddingCosineScorer) and scorer.store is not None
            shipped = scorer.score

            def recording(query: str, texts: list[str]) -> tuple[list[float], set[int]]:
                calls.append((query, list(texts)))
                read.update(w for text in texts for w in read_windows(query, text))
                return shipped(query, texts)

            scorer.score = recording  # type: ignore[method-assign,assignment]
            search = Search(running.client, Fusion())
            errors = 0
            for position, query in progress.over(_answerable(benchmark), "search"):
                body = {"query": query.query, "namespace": loaded.namespaces[position]}
                try:
                    search.search(body | {"top_k": max(KS)} | BASE_BODY)
                except KeymemError:
                    errors += 1
            directory, dim, rows = scorer.store.directory, scorer.backend.dim, len(scorer.store)
        heads = {cosine_head(m.content) for m in benchmark.memories}
        report: dict[str, Any] = {
            "file": args.file.name,
            "queries": len(_answerable(benchmark)),
            "search_errors": errors,
            "score_calls": len(calls),
            "rows": rows,
            "heads": len(heads),
            "read": len(read),
            "read_share_of_rows": round(len(read) / rows, 3),
            "heads_read_share": round(len(read & heads) / len(heads), 3),
        }
        backend = scorer.backend

        def restarted() -> EmbeddingCosineScorer:
            store = PassageStore(directory, dim, DEFAULT_CACHE_ENTRIES)
            return EmbeddingCosineScorer(backend, DEFAULT_CACHE_ENTRIES, store)

        report["current"] = cpu_per_call(calls, restarted)
        end_generation(directory, dim)
        report["previous"] = cpu_per_call(calls, restarted)
        report["cold"] = cpu_per_call(
            calls, lambda: EmbeddingCosineScorer(backend, DEFAULT_CACHE_ENTRIES, None)
        )
    for name, value in report.items():
        print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
