"""One eval run: keymem through the real services, then the baselines, scored the same way.

keymem goes first: a file that cannot be loaded (say ``--keys auto`` before auto-keys exist)
fails in seconds instead of after minutes of baseline embedding, and the services are stopped
before the in-process models load, so neither side's latency is measured while the other
competes for the two cores. Every method sees the same queries, the same candidate scopes
and the same metric code.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError
from keymem.services.evaluation.baselines import (
    BASELINES,
    KEYED_BASELINES,
    KEYED_SUFFIX,
    BaselineSuite,
    Ranked,
)
from keymem.services.evaluation.dataset import Benchmark, Query
from keymem.services.evaluation.deployment import temporary_deployment
from keymem.services.evaluation.loader import KeyMode, LoadedStore, check_key_mode, load
from keymem.services.evaluation.metrics import ScoreSheet
from keymem.services.evaluation.progress import Progress
from keymem.services.evaluation.recall import (
    INJECT,
    SEARCH,
    KeymemRecall,
    MethodUnavailable,
    require,
)
from keymem.services.evaluation.tokens import tokenizer

KEYMEM = "keymem"
METHODS = (KEYMEM, *BASELINES)
CLIENT_TIMEOUT_MS = 30_000


@dataclass
class MethodResult:
    """One method's scores and latencies, or why it could not run."""

    name: str
    sheet: ScoreSheet
    latencies_ms: list[float] = field(default_factory=list)
    unavailable: str | None = None
    errors: int = 0
    first_error: str | None = None

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.latencies_ms) if self.latencies_ms else None

    def record(self, query: Query, ranked: Ranked) -> None:
        self.sheet.add(query.type, ranked.ids, query.gold)
        self.latencies_ms.append(ranked.ms)

    def failed(self, query: Query, error: KeymemError) -> None:
        """A query whose call failed scores as an empty ranking (a miss) and is counted."""
        self.sheet.add(query.type, [], query.gold)
        self.errors += 1
        self.first_error = self.first_error or f"query {query.id!r}: {error}"


@dataclass
class InjectResult:
    """The inject path (what the hook shows): silent on ``gold: []`` queries, and how often it
    shows a gold memory on the answerable ones."""

    queries: int  # with gold: []
    silent: int = 0
    unavailable: str | None = None
    errors: int = 0
    answered: dict[str, list[int]] = field(default_factory=dict)  # type -> [gold shown, asked]

    @property
    def rate(self) -> float | None:
        """The not-found rate: the share of ``gold: []`` queries where nothing was shown."""
        answered = self.queries - self.errors
        if self.unavailable is not None or answered <= 0:
            return None
        return self.silent / answered

    def record(self, query: Query, shown: list[str]) -> None:
        if not query.answerable:
            self.silent += not shown
            return
        tally = self.answered.setdefault(query.type, [0, 0])
        tally[0] += bool(set(shown) & set(query.gold))
        tally[1] += 1

    def gold_shown(self, query_type: str | None = None) -> tuple[int, int]:
        """(answerable queries where a gold memory was shown, answerable queries asked)."""
        tallies = self.answered.values() if query_type is None else [self.answered[query_type]]
        return sum(t[0] for t in tallies), sum(t[1] for t in tallies)


@dataclass
class EvalResult:
    benchmark: Benchmark
    source: str
    ks: tuple[int, ...]
    key_mode: KeyMode
    tokenization: str
    methods: list[MethodResult]
    inject: InjectResult
    store: LoadedStore | None = None
    wall_s: float = 0.0


@dataclass(frozen=True)
class EvalOptions:
    ks: tuple[int, ...]
    key_mode: KeyMode
    methods: tuple[str, ...]
    tokenization: str


def _answerable(benchmark: Benchmark) -> list[tuple[int, Query]]:
    return [(i, q) for i, q in enumerate(benchmark.queries) if q.answerable]


def run_keymem(
    client: Client,
    benchmark: Benchmark,
    options: EvalOptions,
    progress: Progress,
    result: MethodResult,
    inject: InjectResult,
) -> LoadedStore:
    """Load the benchmark into the running services, then ask them every query."""
    store = load(client, benchmark, options.key_mode, progress)
    recall = KeymemRecall(client, store, max(options.ks))
    _search_answerable(client, benchmark, recall, progress, result)
    _inject_every_query(client, benchmark, recall, progress, inject)
    return store


def _search_answerable(
    client: Client,
    benchmark: Benchmark,
    recall: KeymemRecall,
    progress: Progress,
    result: MethodResult,
) -> None:
    try:
        require(client, SEARCH)
    except MethodUnavailable as exc:
        result.unavailable = str(exc)
        progress.note(f"keymem: {exc}; the baselines still run")
        return
    namespaces = recall.store.namespaces
    if benchmark.queries:
        recall.warm_up(benchmark.queries[0].query, namespaces[0])
    for position, query in progress.over(_answerable(benchmark), "keymem: hybrid recall"):
        try:
            result.record(query, recall.search(query.query, namespaces[position]))
        except KeymemError as exc:
            result.failed(query, exc)


def _inject_every_query(
    client: Client,
    benchmark: Benchmark,
    recall: KeymemRecall,
    progress: Progress,
    inject: InjectResult,
) -> None:
    try:
        require(client, INJECT)
    except MethodUnavailable as exc:
        inject.unavailable = str(exc)
        return
    namespaces = recall.store.namespaces
    for position, query in progress.over(list(enumerate(benchmark.queries)), "keymem: inject"):
        try:
            inject.record(query, recall.inject(query.query, namespaces[position]))
        except KeymemError:
            if query.answerable:
                inject.record(query, [])  # asked, nothing shown
            else:
                inject.errors += 1


def run_baselines(
    benchmark: Benchmark, options: EvalOptions, progress: Progress, results: dict[str, MethodResult]
) -> None:
    suite = BaselineSuite(
        benchmark,
        [m for m in _rows(options) if m != KEYMEM],
        progress,
        tokenize=tokenizer(options.tokenization),
    )
    for _, query in progress.over(_answerable(benchmark), "baselines: ranking"):
        for name, ranked in suite.rank(query).items():
            results[name].record(query, ranked)


def _rows(options: EvalOptions) -> list[str]:
    """The selected methods in table order; with provided keys each flat baseline also runs
    over the documents with their keys appended (its ``+keys`` twin)."""
    keyed = options.key_mode == "provided"
    rows = [m for m in METHODS if m in options.methods]
    twins = [f"{m}{KEYED_SUFFIX}" for m in BASELINES if m in options.methods]
    return rows + (twins if keyed else [])


def evaluate(
    benchmark: Benchmark, source: str, options: EvalOptions, progress: Progress
) -> EvalResult:
    started = time.monotonic()
    if KEYMEM in options.methods:
        check_key_mode(benchmark, options.key_mode)  # before minutes of starting and loading
    selected = _rows(options)
    results = {m: MethodResult(m, ScoreSheet(options.ks)) for m in selected}
    silent_count = sum(1 for q in benchmark.queries if not q.answerable)
    inject = InjectResult(silent_count)
    store = None
    if KEYMEM in results:
        with (
            temporary_deployment(progress.note) as settings,
            Client(settings.endpoints.frontend, timeout_ms=CLIENT_TIMEOUT_MS) as client,
        ):
            store = run_keymem(client, benchmark, options, progress, results[KEYMEM], inject)
    else:
        inject.unavailable = "keymem not among --methods"
    if any(m in results for m in (*BASELINES, *KEYED_BASELINES)):
        run_baselines(benchmark, options, progress, results)
    return EvalResult(
        benchmark=benchmark,
        source=source,
        ks=options.ks,
        key_mode=options.key_mode,
        tokenization=options.tokenization,
        methods=[results[m] for m in selected],
        inject=inject,
        store=store,
        wall_s=time.monotonic() - started,
    )


def parse_methods(raw: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(m.strip() for m in raw.split(",") if m.strip()))
    unknown = [m for m in names if m not in METHODS]
    if unknown or not names:
        raise ValueError(f"--methods takes a comma list of {', '.join(METHODS)}; got {raw!r}")
    return names


def parse_ks(raw: str) -> tuple[int, ...]:
    try:
        ks = tuple(sorted({int(k) for k in raw.split(",") if k.strip()}))
    except ValueError:
        ks = ()
    if not ks or ks[0] < 1:
        raise ValueError(f"--k takes a comma list of positive integers; got {raw!r}")
    return ks
