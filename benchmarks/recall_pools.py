"""Search pools dumped once, re-fused under the router's variants in seconds.

    python -m benchmarks.recall_pools dump FILE [--keys KEYS] --out POOLS.json.gz [--pool N]
        [--variant NAME]
    python -m benchmarks.recall_pools fuse POOLS.json.gz [--variants a,b] [--pool 64]

The recall ablation (``benchmarks/recall_ablation.py``) measures a variant end to end, which
costs a file's whole search pass per variant. Most ideas about the final order change only the
router's fusion of a pool the graph already handed over, and four rounds of recall work each
wrote a throwaway script to dump those pools and re-fuse them (docs/history/recall-*.md,
"Method"). This is that script, kept.

``dump`` runs the ablation's in-process stack (``recall_ablation.in_process``), loads the file
and searches every answerable query as shipped (or under the ablation's ``--variant``: its
graph scoring, memory vectors, fusion and body), with a pool of ``--pool`` (200: deeper than
the product's 64, so a screen can ask what a larger pool would hold). For each query it keeps
the pool exactly as ``fuse_blend`` received it — every candidate's components, the reranker's
relevance of its text and of its ``about``, its keys (concept, type, link weight, auto,
active members) and the benchmark ids it stands for — and the search's matched keys.

``fuse`` re-fuses every dumped pool cut to ``--pool`` under the ablation's router-side
variants (those that change only the ``Fusion``) with the product's own ``fuse_blend`` and
``select_evidence``, and prints the ablation's table (fit / held halves). The graph's first
``--pool`` candidates and the dense leg's members past its cut (``pool_of``) are the pool
the product would have had: a re-fusion reproduces the ablation's row of the variant the
pools were dumped under. A graph-side variant (``Scoring``, a search option) cannot be
re-fused: it changes which memories enter the pool.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import benchmarks.recall_ablation as ablation
from keymem.protocol.limits import POOL_DEFAULT, POOL_MAX
from keymem.services.evaluation.dataset import Query, load_benchmark
from keymem.services.evaluation.loader import KEY_MODES, KeyMode, default_key_mode
from keymem.services.evaluation.loader import load as load_store
from keymem.services.evaluation.progress import Progress
from keymem.services.graph.hybrid import Scoring
from keymem.services.graph.memory_vectors import PRODUCT_CODE
from keymem.services.graph.state import GraphState
from keymem.services.memory import search as search_module
from keymem.services.memory.search import Fusion, Relevance, Search, is_comparison

DUMP_POOL = 200  # deeper than the product's pool: what a larger one would have held
TOP_K = max(ablation.KS)


@contextlib.contextmanager
def captured_pools() -> Iterator[list[tuple[list[dict[str, Any]], Relevance | None]]]:
    """Every (pool, relevance) ``fuse_blend`` receives while the context is open."""
    seen: list[tuple[list[dict[str, Any]], Relevance | None]] = []
    blend = search_module.fuse_blend

    def spy(
        candidates: list[dict[str, Any]],
        relevance: Relevance | None,
        fusion: Fusion,
        persons: frozenset[str] = frozenset(),
    ) -> list[dict[str, Any]]:
        seen.append((candidates, relevance))
        return blend(candidates, relevance, fusion, persons)

    with mock.patch.object(search_module, "fuse_blend", spy):
        yield seen


def _keys_of(state: GraphState, memory_id: str) -> list[dict[str, Any]]:
    return [
        {
            "concept": state.keys[key_id].concept,
            "key_type": state.keys[key_id].key_type,
            "weight": link.weight,
            "auto": link.auto,
            "learned": link.learned,
            "members": state.active_count.get(key_id, 0),
        }
        for key_id, link in state.mem_links.get(memory_id, {}).items()
        if key_id in state.keys
    ]


def _pool_record(
    state: GraphState,
    pool: list[dict[str, Any]],
    relevance: Relevance | None,
    to_benchmark: Any,
) -> list[dict[str, Any]]:
    return [
        {
            **candidate,
            "benchmark_ids": to_benchmark([candidate["memory_id"]]),
            "relevance": relevance.scores[i] if relevance is not None else None,
            "about_relevance": relevance.about[i] if relevance and relevance.about else None,
            "named_relevance": relevance.named[i] if relevance and relevance.named else None,
            "keys": _keys_of(state, candidate["memory_id"]),
        }
        for i, candidate in enumerate(pool)
    ]


def dump(
    path: Path,
    mode: KeyMode | None,
    out: Path,
    pool: int,
    variant: str,
    progress: Progress,
) -> int:
    """Search every answerable query of ``path`` under the ablation's ``variant`` (its graph
    scoring, memory vectors and fusion); write its pools to ``out``."""
    chosen = ablation.VARIANTS[variant]
    benchmark = load_benchmark(path)
    mode = mode or default_key_mode(benchmark)
    rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="km-pools-") as home,
        ablation.in_process(Path(home)) as running,
    ):
        store = load_store(running.client, benchmark, mode, progress)
        running.warm([m.content for m in benchmark.memories], progress, None)
        if chosen.vectors != PRODUCT_CODE:
            running.vectorise()
            running.graph.state.memory_vectors = running.vectors[chosen.vectors]
        running.graph.scoring = chosen.scoring
        search = Search(running.client, chosen.fusion)
        answerable = ablation._answerable(benchmark)
        if answerable:
            first, query = answerable[0]
            ablation._warm_up(search, query.query, store.namespaces[first])
        for position, query in progress.over(answerable, "dump"):
            body = {
                "query": query.query,
                "namespace": store.namespaces[position],
                "top_k": TOP_K,
                **ablation.BASE_BODY,
                **chosen.body,
                "pool": pool,
            }
            with captured_pools() as seen:
                reply = search.search(body)
            candidates, relevance = seen[-1]
            rows.append(
                {
                    "query": {
                        "id": query.id,
                        "query": query.query,
                        "gold": list(query.gold),
                        "type": query.type,
                    },
                    "keys": reply["keys"],
                    "degraded": reply["degraded"],
                    "pool": _pool_record(
                        running.graph.state, candidates, relevance, store.to_benchmark
                    ),
                }
            )
    document = {"file": path.name, "keys": mode, "pool": pool, "variant": variant, "rows": rows}
    with gzip.open(out, "wt", encoding="utf-8") as sink:
        sink.write(json.dumps(document))  # one write: json.dump's many small ones crawl
    print(f"{len(rows)} pools of {path.name} (--keys {mode}, pool {pool}, {variant}) -> {out}")
    return 0


def router_side(variants: Mapping[str, ablation.Variant]) -> dict[str, Fusion]:
    """The variants a dumped pool can answer: those that change only the router's fusion."""
    plain = ablation.Variant()
    return {
        name: v.fusion
        for name, v in variants.items()
        if v.scoring == Scoring() and v.body == plain.body and v.scorer == plain.scorer
    }


def pool_of(row: Mapping[str, Any], pool: int) -> list[dict[str, Any]]:
    """The candidates the product's pool of ``pool`` would have held: the graph's first
    ``pool``, then the dense leg's members past that cut (``dense_pooled``, in the leg's
    order)."""
    head, rest = list(row["pool"][:pool]), list(row["pool"][pool:])
    appended = [c for c in rest if c["components"].get("dense_rank") is not None]
    return head + sorted(appended, key=lambda c: int(c["components"]["dense_rank"]))


def refused(row: Mapping[str, Any], fusion: Fusion, pool: int) -> list[str]:
    """One dumped pool cut to ``pool`` and re-fused: the ranking as benchmark ids."""
    candidates = [dict(c) for c in pool_of(row, pool)]
    relevance = None
    if candidates and candidates[0]["relevance"] is not None:
        relevance = Relevance(
            [c["relevance"] for c in candidates],
            "dumped",
            # the reranker read the abouts only when the variant's fusion asks it to
            [c["about_relevance"] for c in candidates] if fusion.about else [],
            # the text as named, read across scripts (older dumps hold none)
            [c.get("named_relevance") for c in candidates] if fusion.cross_named else [],
        )
    persons = search_module.named_persons(row["keys"])
    ranked = search_module.fuse_blend(candidates, relevance, fusion, persons)
    if fusion.evidence and is_comparison(row["query"]["query"]):
        ranked = search_module.select_evidence(ranked, row["keys"], TOP_K)
    ranking: list[str] = []
    for candidate in ranked:
        ranking += [b for b in candidate["benchmark_ids"] if b not in ranking]
    return ranking


def fuse(path: Path, names: Sequence[str] | None, pool: int) -> int:
    with gzip.open(path, "rt", encoding="utf-8") as source:
        document = json.load(source)
    usable = router_side(ablation.VARIANTS)
    chosen = list(names or usable)
    unknown = [n for n in chosen if n not in usable]
    if unknown:
        raise SystemExit(f"not a router-side variant: {unknown}; known: {', '.join(usable)}")
    sheets = {name: ablation.Sheets() for name in chosen}
    for row in document["rows"]:
        asked = row["query"]
        query = Query(
            asked["id"], asked["query"], tuple(asked["gold"]), False, asked["type"], None, ""
        )
        for name in chosen:
            sheets[name].add(query, refused(row, usable[name], pool))
    print(f"## {document['file']} (--keys {document['keys']}, re-fused pools of {pool})")
    print(ablation.table(sheets))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    dumping = commands.add_parser("dump", help="search a file's queries, keep their pools")
    dumping.add_argument("file", type=Path)
    dumping.add_argument("--keys", choices=KEY_MODES)
    dumping.add_argument("--out", type=Path, required=True)
    dumping.add_argument("--pool", type=int, default=DUMP_POOL, help=f"1-{POOL_MAX}")
    dumping.add_argument(
        "--variant", default="shipped", choices=ablation.VARIANTS, help="searched under"
    )
    fusing = commands.add_parser("fuse", help="re-fuse dumped pools under router-side variants")
    fusing.add_argument("pools", type=Path)
    fusing.add_argument("--variants", help="comma list of router-side ablation variants")
    fusing.add_argument("--pool", type=int, default=POOL_DEFAULT)
    args = parser.parse_args(argv)
    if args.command == "dump" and not 1 <= args.pool <= POOL_MAX:
        parser.error(f"--pool must be 1-{POOL_MAX}")
    started = time.monotonic()
    if args.command == "dump":
        code = dump(args.file, args.keys, args.out, args.pool, args.variant, Progress(sys.stderr))
    else:
        code = fuse(args.pools, args.variants.split(",") if args.variants else None, args.pool)
    print(f"wall {time.monotonic() - started:.0f} s", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
