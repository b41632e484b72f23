"""Recall ablation: one benchmark load, many ``memory.search`` variants, one table.

    python -m benchmarks.recall_ablation FILE [--keys provided|title|auto] [--limit N]
        [--variants a,b,...] [--no-baselines] [--json OUT] [--dump OUT [--dump-variant V]]

``keymem eval`` answers "how good is recall as shipped"; tuning needs "which of these ideas
helps", and reloading a file into a fresh deployment for every idea costs minutes each. So this
driver loads a dev file ONCE into a real throwaway deployment (``services.evaluation``'s
deployment, loader, metrics and baselines, used read-only, so the numbers compare with
``keymem eval`` and BASELINES.md) and sends every answerable query through ``memory.search``
under each variant: a variant is just a set of search-body options (``hops``, ``pool``,
``rerank`` and the ``tuning`` knobs of ``services.memory.search``). Each idea costs one query
pass. The flat baselines (bm25 with keymem's tokens, dense, hybrid) are computed in the same
run, after the services are down, exactly as ``keymem eval`` does. Below the table: failed
and ``degraded`` replies per variant (a timed-out reranker otherwise passes for a worse
ranking) and each variant's median client wall time (the first variant of a query pays its
cold caches).

Settings that win here must win on several files (issue 8: no per-dataset switches).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError
from keymem.services.evaluation.baselines import BASELINES, BaselineSuite
from keymem.services.evaluation.dataset import Benchmark, Query, load_benchmark
from keymem.services.evaluation.deployment import temporary_deployment
from keymem.services.evaluation.loader import (
    KEY_MODES,
    KeyMode,
    LoadedStore,
    default_key_mode,
    load,
)
from keymem.services.evaluation.metrics import Scores, ScoreSheet
from keymem.services.evaluation.progress import Progress
from keymem.services.evaluation.recall import memory_ids
from keymem.services.evaluation.tokens import tokenizer
from keymem.services.memory.search import POOL_DEFAULT, TOP_K_MAX

KS = (2, 5, 10)
REPORT_K = 5  # the per-type column: all@5 (recall@5)
CLIENT_TIMEOUT_MS = 30_000
QUERY_TIMEOUT_MS = 30_000
BASE_BODY: dict[str, Any] = {"hops": 2}  # what ``keymem eval`` sends besides query/ns/top_k
WARM_UP_CALLS = 3  # until a search comes back undegraded

# name -> search-body options on top of BASE_BODY. "shipped" is whatever the build defaults to.
# recall before issue 8
LEGACY = {
    "fusion": "graph_then_rerank",
    "hop_gate": "none",
    "seeds": 10,
    "fallback": False,
    "link_weighted": False,
    "phrase_keys": 0,
    "named_hops": False,
}
# the first round of issue 8 (blend, one hop seed, fallback), before the keyless files
ROUND1 = {"link_weighted": False, "phrase_keys": 0, "named_hops": False, "hop_gate": "relevance"}
VARIANTS: dict[str, dict[str, Any]] = {
    "shipped": {},
    "shipped_again": {},  # the same search twice: a difference would mean recall has state
    "legacy": {"pool": 30, "tuning": LEGACY},
    "legacy_no_evidence": {"pool": 30, "tuning": {**LEGACY, "evidence": False}},
    "round1": {"pool": 30, "tuning": ROUND1},
    "lists": {"tuning": {"fusion": "lists", "hop_gate": "none", "seeds": 10}},
    "rerank_off": {"rerank": False},
    "hops0": {"hops": 0},
    "pool30": {"pool": 30},
    "pool128": {"pool": 128, "tuning": {"bm25_depth": 128}},
    "no_link_weight": {"tuning": {"link_weighted": False}},
    "no_phrases": {"tuning": {"phrase_keys": 0}},
    "phrases3": {"tuning": {"phrase_keys": 3}},
    "phrases_all_links": {"tuning": {"phrase_links": "all"}},
    "phrase_floor_recall": {"tuning": {"phrase_floor": 0.45}},  # USE-m's key-recall floor
    "auto_hops": {"tuning": {"auto_hops": True}},
    "no_named_hops": {"tuning": {"named_hops": False}},
    "hop_gated": {"tuning": {"hop_gate": "relevance"}},
    "no_named_hops_gated": {"tuning": {"named_hops": False, "hop_gate": "relevance"}},
    "no_evidence": {"tuning": {"evidence": False}},
    "key_max": {"tuning": {"key_agg": "max"}},
    "no_key": {"tuning": {"key_weight": 0.0}},
    "dense_half": {"tuning": {"dense_weight": 0.5}},
    "dense_1_5": {"tuning": {"dense_weight": 1.5}},
    "no_hop_term": {"tuning": {"hop_weight": 0.0}},
    "seeds3": {"tuning": {"seeds": 3}},
    "seeds10": {"tuning": {"seeds": 10}},
    "no_fallback": {"tuning": {"fallback": False}},
}


def _answerable(benchmark: Benchmark) -> list[tuple[int, Query]]:
    return [(i, q) for i, q in enumerate(benchmark.queries) if q.answerable]


class Runs:
    """Per variant: the scores, failed and degraded calls, and each call's wall time (ms)."""

    def __init__(self, names: Iterable[str]) -> None:
        self.sheets = {name: ScoreSheet(KS) for name in names}
        self.errors = dict.fromkeys(self.sheets, 0)
        self.degraded = dict.fromkeys(self.sheets, 0)
        self.ms: dict[str, list[float]] = {name: [] for name in self.sheets}

    def footer(self) -> str:
        failed = {n: e for n, e in self.errors.items() if e}
        slow = {n: d for n, d in self.degraded.items() if d}
        medians = {n: round(statistics.median(v), 1) for n, v in self.ms.items() if v}
        return (
            f"errors: {failed or 'none'}; degraded replies: {slow or 'none'}\n"
            f"median search ms (client wall, shared box): {medians}"
        )


def run_variants(
    client: Client,
    benchmark: Benchmark,
    store: LoadedStore,
    variants: Mapping[str, Mapping[str, Any]],
    progress: Progress,
    dump: list[dict[str, Any]] | None = None,
    dump_with: Mapping[str, Any] | None = None,
) -> Runs:
    """Every answerable query under every variant; a failed call scores as a miss.

    ``dump`` collects, per query, the labelled pool (every candidate's components and reranker
    score, up to the 50 a search returns) of a search with the ``dump_with`` variant's options,
    for offline analysis of fusion formulas.
    """
    runs = Runs(variants)
    answerable = _answerable(benchmark)
    if answerable:
        _warm_up(client, answerable[0][1].query, store.namespaces[answerable[0][0]])
    for position, query in progress.over(answerable, "keymem: variants"):
        if dump is not None:
            dump.append(_pool_of(client, store, query, store.namespaces[position], dump_with or {}))
        for name, options in variants.items():
            body = {
                "query": query.query,
                "namespace": store.namespaces[position],
                "top_k": max(KS),
                **BASE_BODY,
                **options,
            }
            try:
                started = time.perf_counter()
                reply = client.call("memory", "search", body, timeout_ms=QUERY_TIMEOUT_MS)
                runs.ms[name].append((time.perf_counter() - started) * 1000)
                ranking = store.to_benchmark(memory_ids(reply))
                if reply.get("degraded"):
                    runs.degraded[name] += 1
            except KeymemError as exc:
                runs.errors[name] += 1
                if runs.errors[name] == 1:
                    progress.note(f"{name}: {exc}")
                ranking = []
            runs.sheets[name].add(query.type, ranking, query.gold)
    return runs


def _warm_up(client: Client, text: str, namespace: str) -> None:
    """One unscored search first: the reranker's first call after start loads its model and
    times out (the search then degrades to no reranker), which would cost whichever variant
    happens to run first one question."""
    body = {"query": text, "namespace": namespace, "top_k": 1}
    for _ in range(WARM_UP_CALLS):
        reply = client.call("memory", "search", body, timeout_ms=QUERY_TIMEOUT_MS)
        if not reply.get("degraded"):
            return


def _pool_of(
    client: Client, store: LoadedStore, query: Query, namespace: str, options: Mapping[str, Any]
) -> dict[str, Any]:
    pool = options.get("pool", POOL_DEFAULT)
    body = {"query": query.query, "namespace": namespace, "top_k": min(pool, TOP_K_MAX)}
    body.update(BASE_BODY)
    body.update(options)
    reply = client.call("memory", "search", body, timeout_ms=QUERY_TIMEOUT_MS)
    pool = [
        {
            "ids": store.to_benchmark([m["memory_id"]]),
            "components": m["components"],
            "rerank": m.get("rerank_score"),
            "graph_score": m.get("graph_score", m["score"]),
            "matched_keys": m["matched_keys"],
        }
        for m in reply["memories"]
    ]
    fields = ("key_id", "concept", "score", "match_type", "memory_count", "specificity")
    keys = [{k: key.get(k) for k in fields} for key in reply["keys"]]
    return {
        "id": query.id,
        "query": query.query,
        "type": query.type,
        "gold": list(query.gold),
        "pool": pool,
        "keys": keys,
    }


def run_baselines(benchmark: Benchmark, progress: Progress) -> dict[str, ScoreSheet]:
    suite = BaselineSuite(benchmark, BASELINES, progress, tokenize=tokenizer("keymem"))
    sheets = {name: ScoreSheet(KS) for name in BASELINES}
    for _, query in progress.over(_answerable(benchmark), "baselines: ranking"):
        for name, ranked in suite.rank(query).items():
            sheets[name].add(query.type, ranked.ids, query.gold)
    return sheets


def _row(name: str, scores: Scores, types: Sequence[str], sheet: ScoreSheet) -> str:
    cells = [f"{scores.recall[k]:.3f}" for k in KS]
    cells += [f"{scores.all[REPORT_K]:.3f}", f"{scores.all[max(KS)]:.3f}", f"{scores.mrr:.3f}"]
    for query_type in types:
        typed = sheet.summary(query_type)
        cells.append(f"{typed.all[REPORT_K]:.2f} ({typed.recall[REPORT_K]:.2f})")
    return f"| {name} | " + " | ".join(cells) + " |"


def table(sheets: Mapping[str, ScoreSheet]) -> str:
    types = sorted({t for sheet in sheets.values() for t in sheet.types()})
    head = [f"recall@{k}" for k in KS] + [f"all@{REPORT_K}", f"all@{max(KS)}", "MRR"]
    head += [f"{t} all@{REPORT_K} (r@{REPORT_K})" for t in types]
    lines = ["| variant | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
    lines += [_row(n, s.summary(), types, s) for n, s in sheets.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--keys", choices=KEY_MODES)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--variants", help=f"comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the scores here")
    parser.add_argument("--dump", type=Path, help="write every query's labelled pool here")
    parser.add_argument("--dump-variant", default="shipped", help="the options of the dump")
    args = parser.parse_args(argv)

    benchmark = load_benchmark(args.file)
    if args.limit:
        benchmark = benchmark.limited(args.limit)
    names = args.variants.split(",") if args.variants else list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    mode: KeyMode = args.keys or default_key_mode(benchmark)
    progress = Progress(sys.stderr)
    started = time.monotonic()
    with (
        temporary_deployment(progress.note) as settings,
        Client(settings.endpoints.frontend, timeout_ms=CLIENT_TIMEOUT_MS) as client,
    ):
        store = load(client, benchmark, mode, progress)
        dump: list[dict[str, Any]] | None = [] if args.dump else None
        runs = run_variants(
            client,
            benchmark,
            store,
            {n: VARIANTS[n] for n in names},
            progress,
            dump,
            VARIANTS[args.dump_variant],
        )
    sheets = dict(runs.sheets)
    if not args.no_baselines:
        sheets.update(run_baselines(benchmark, progress))
    answerable = len(_answerable(benchmark))
    print(f"## {args.file.name} (--keys {mode}, {answerable} queries, limit {args.limit})")
    print(table(sheets))
    print(runs.footer())
    print(f"wall {time.monotonic() - started:.0f} s")
    if args.dump and dump is not None:
        args.dump.write_text(json.dumps(dump))
    if args.json:
        out = {
            n: {
                "all": s.summary().to_dict(),
                "types": {t: s.summary(t).to_dict() for t in s.types()},
            }
            for n, s in sheets.items()
        }
        args.json.write_text(
            json.dumps(
                {"file": args.file.name, "keys": mode, "limit": args.limit, "scores": out}, indent=1
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
