"""Hebbian replay: does learning from the hook's traffic improve later recall, and is it bounded?

    python -m benchmarks.hebbian_replay FILE [--keys auto|title|provided] [--limit N]
        [--gold-epochs 5] [--epochs 20] [--train-share 0.5] [--json OUT]

Loads a dev file once into a real throwaway deployment (``services.evaluation``'s deployment
and loader, as ``benchmarks/recall_ablation.py`` does) and replays its answerable queries as an
agent with the hook would send them:

1. **before** — recall of ``memory.search`` (recall@5/@10, MRR) and the hook's ``memory.inject``
   hit@2 on both splits (queries split by a hash of their id: ``train`` and ``held-out``);
2. **learn** — passes over the train split (``--gold-epochs``): inject, and when a gold memory
   is surfaced the agent reads it (``read_memory``), which is what the learner credits;
3. **after** — the same measurements after the first pass and after the last. Held-out is the
   evidence; train is labelled as what it is (the same queries that were learned from);
4. **runaway** — ``--epochs`` more passes over the train split in which the agent reads *every*
   surfaced memory, gold or not (adversarial reads), with the largest link weight and the
   largest weight / starting-weight ratio seen in the graph's replies after every epoch, and
   held-out measured again at the end.

Measurement injects use their own session id, so only the training reads (session ``train``)
can be credited; searches never reinforce.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError
from keymem.services.evaluation.dataset import Query, load_benchmark
from keymem.services.evaluation.deployment import temporary_deployment
from keymem.services.evaluation.loader import (
    KEY_MODES,
    KeyMode,
    LoadedStore,
    default_key_mode,
    load,
)
from keymem.services.evaluation.metrics import ScoreSheet, hit_at
from keymem.services.evaluation.progress import Progress
from keymem.services.evaluation.recall import memory_ids

KS = (2, 5, 10)
CLIENT_TIMEOUT_MS = 30_000
CALL_TIMEOUT_MS = 30_000
SEARCH_BODY: dict[str, Any] = {"hops": 2, "top_k": max(KS)}  # as ``keymem eval`` searches
INJECT_TOP_K = 2  # what the hook surfaces by default
TRAIN_SESSION = "hebbian-replay-train"
MEASURE_SESSION = "hebbian-replay-measure"
EPOCHS_DEFAULT = 20
GOLD_EPOCHS_DEFAULT = 5
TRAIN_SHARE_DEFAULT = 0.5
MEASURE_AT = (5, 10)  # runaway epochs after which held-out is measured besides the last
WARM_UP_CALLS = 3


@dataclass
class Measurement:
    """One split's recall at one point of the replay."""

    search: ScoreSheet = field(default_factory=lambda: ScoreSheet(KS))
    inject_hits: list[float] = field(default_factory=list)
    errors: int = 0
    # Queries that matched a key with a learned link to one of their gold memories, and those
    # whose top 10 holds a gold memory reached through such a link: how far learning reaches.
    learned_matched: int = 0
    learned_reached: int = 0

    def row(self, label: str) -> str:
        s = self.search.summary()
        hit2 = sum(self.inject_hits) / len(self.inject_hits) if self.inject_hits else 0.0
        cells = [f"{s.recall[5]:.3f}", f"{s.recall[10]:.3f}", f"{s.all[5]:.3f}", f"{s.mrr:.3f}"]
        cells += [f"{hit2:.3f}", f"{self.learned_matched}", f"{self.learned_reached}"]
        return f"| {label} | {s.queries} | " + " | ".join(cells) + " |"

    def to_dict(self) -> dict[str, Any]:
        hit2 = sum(self.inject_hits) / len(self.inject_hits) if self.inject_hits else 0.0
        return {
            **self.search.summary().to_dict(),
            "inject_hit@2": hit2,
            "errors": self.errors,
            "learned_matched": self.learned_matched,
            "learned_reached": self.learned_reached,
        }


@dataclass
class Weights:
    """Every link weight the graph reported changing, and the largest seen."""

    links: dict[tuple[str, str], float] = field(default_factory=dict)
    start: dict[tuple[str, str], float] = field(default_factory=dict)
    reads: int = 0
    credited: int = 0
    learned: set[tuple[str, str]] = field(default_factory=set)  # associations the graph made
    learned_per_memory: dict[str, int] = field(default_factory=dict)

    def note(self, learned: dict[str, Any]) -> None:
        for row in learned.get("associated", []):
            link = (row["key_id"], row["memory_id"])
            self.learned.add(link)
            self.learned_per_memory[link[1]] = self.learned_per_memory.get(link[1], 0) + 1
            self.start[link] = float(row["weight"])  # a new link starts at its learned weight
            self.links[link] = float(row["weight"])
        for row in [*learned["reinforced"], *learned["decayed"]]:
            link = (row["key_id"], row["memory_id"])
            self.start.setdefault(link, float(row["before"]))
            self.links[link] = float(row["weight"])

    def summary(self) -> dict[str, float]:
        made = {
            "learned_links": len(self.learned),
            "max_learned_per_memory": max(self.learned_per_memory.values(), default=0),
            "max_learned_weight": max((self.links[k] for k in self.learned), default=0.0),
        }
        if not self.links:
            return {"links": 0, "max_weight": 0.0, "max_ratio": 0.0, "mean_ratio": 0.0} | made
        ratios = [self.links[k] / self.start[k] for k in self.links]
        return {
            "links": len(self.links),
            "max_weight": max(self.links.values()),
            "max_ratio": max(ratios),
            "mean_ratio": sum(ratios) / len(ratios),
        } | made


def split(queries: Sequence[Query], train_share: float) -> tuple[list[Query], list[Query]]:
    """Train and held-out by a hash of the query id: stable across runs, blind to content."""
    train: list[Query] = []
    held_out: list[Query] = []
    for query in queries:
        digest = hashlib.sha256(query.id.encode()).digest()
        (train if digest[0] / 256 < train_share else held_out).append(query)
    return train, held_out


def gold_surfaced(store: LoadedStore, reply: dict[str, Any], gold: Sequence[str]) -> list[str]:
    """The surfaced keymem ids that are gold for the query."""
    return [m for m in memory_ids(reply) if set(store.to_benchmark([m])) & set(gold)]


def inject(client: Client, query: Query, namespace: str, session: str) -> dict[str, Any]:
    body = {
        "prompt": query.query,
        "namespaces": [namespace],
        "top_k": INJECT_TOP_K,
        "session_id": session,
    }
    reply: dict[str, Any] = client.call("memory", "inject", body, timeout_ms=CALL_TIMEOUT_MS)
    return reply


def count_learned(
    store: LoadedStore,
    found: dict[str, Any],
    gold: Sequence[str],
    learned: set[tuple[str, str]],
    result: Measurement,
) -> None:
    """Whether the query matched a key learned to one of its gold memories, and whether its
    results reached a gold memory through such a link."""
    wanted = set(gold)
    learned_gold = {(k, m) for k, m in learned if set(store.to_benchmark([m])) & wanted}
    matched = {key["key_id"] for key in found.get("keys", [])}
    if any(k in matched for k, _ in learned_gold):
        result.learned_matched += 1
    if any(
        (k, shown["memory_id"]) in learned_gold
        for shown in found.get("memories", [])
        for k in shown.get("matched_keys", [])
    ):
        result.learned_reached += 1


def measure(
    client: Client,
    store: LoadedStore,
    queries: Sequence[Query],
    spaces: dict[str, str],
    learned: set[tuple[str, str]] | None = None,
) -> Measurement:
    result = Measurement()
    for query in queries:
        body = {"query": query.query, "namespace": spaces[query.id], **SEARCH_BODY}
        try:
            found = client.call("memory", "search", body, timeout_ms=CALL_TIMEOUT_MS)
            result.search.add(query.type, store.to_benchmark(memory_ids(found)), query.gold)
            if learned:
                count_learned(store, found, query.gold, learned, result)
            shown = inject(client, query, spaces[query.id], MEASURE_SESSION)
            ranking = store.to_benchmark(memory_ids(shown))
            result.inject_hits.append(hit_at(ranking, query.gold, INJECT_TOP_K))
        except KeymemError:
            result.errors += 1
            result.search.add(query.type, [], query.gold)
            result.inject_hits.append(0.0)
    return result


def train_pass(
    client: Client,
    store: LoadedStore,
    queries: Sequence[Query],
    spaces: dict[str, str],
    weights: Weights,
    *,
    adversarial: bool,
) -> None:
    """Inject every train query; read what surfaced (gold only, or everything)."""
    for query in queries:
        try:
            shown = inject(client, query, spaces[query.id], TRAIN_SESSION)
        except KeymemError:
            continue
        wanted = memory_ids(shown) if adversarial else gold_surfaced(store, shown, query.gold)
        for memory_id in wanted:
            body = {
                "memory_id": memory_id,
                "namespace": spaces[query.id],
                "session_id": TRAIN_SESSION,
            }
            try:
                read = client.call("memory", "read_memory", body, timeout_ms=CALL_TIMEOUT_MS)
            except KeymemError:
                continue
            weights.reads += 1
            if "surfaced_path" in read:
                weights.credited += 1
                weights.note(read["surfaced_path"])


def gold_overlap(train: Sequence[Query], held_out: Sequence[Query]) -> float:
    """Share of held-out queries with a gold memory that some train query also has: the only
    way learning on one question can help another is through a shared memory or key."""
    trained = {g for q in train for g in q.gold}
    return sum(1 for q in held_out if trained & set(q.gold)) / len(held_out) if held_out else 0.0


def learned_cells(point: dict[str, Any]) -> str:
    return (
        f"{point['learned_links']} | {point['max_learned_per_memory']} | "
        f"{point['max_learned_weight']:.3f}"
    )


def warm_up(client: Client, query: Query, namespace: str) -> None:
    """The reranker's first call loads its model and may time out: spend it unscored."""
    body = {"query": query.query, "namespace": namespace, "top_k": 1}
    for _ in range(WARM_UP_CALLS):
        if not client.call("memory", "search", body, timeout_ms=CALL_TIMEOUT_MS).get("degraded"):
            return


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--keys", choices=KEY_MODES)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--gold-epochs", type=int, default=GOLD_EPOCHS_DEFAULT)
    parser.add_argument("--epochs", type=int, default=EPOCHS_DEFAULT)
    parser.add_argument("--train-share", type=float, default=TRAIN_SHARE_DEFAULT)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    benchmark = load_benchmark(args.file)
    if args.limit:
        benchmark = benchmark.limited(args.limit)
    mode: KeyMode = args.keys or default_key_mode(benchmark)
    answerable = [q for q in benchmark.queries if q.answerable]
    train, held_out = split(answerable, args.train_share)
    progress = Progress(sys.stderr)
    started = time.monotonic()
    rows: dict[str, Measurement] = {}
    trajectory: list[dict[str, Any]] = []
    weights = Weights()
    with (
        temporary_deployment(progress.note) as settings,
        Client(settings.endpoints.frontend, timeout_ms=CLIENT_TIMEOUT_MS) as client,
    ):
        store = load(client, benchmark, mode, progress)
        spaces = {q.id: store.namespaces[i] for i, q in enumerate(benchmark.queries)}
        warm_up(client, answerable[0], spaces[answerable[0].id])
        progress.note("measuring before learning")
        rows["held-out, before"] = measure(client, store, held_out, spaces)
        rows["train, before"] = measure(client, store, train, spaces)
        gold_passes: list[dict[str, Any]] = []
        for epoch in range(1, args.gold_epochs + 1):
            progress.note(f"learning: pass {epoch}, gold reads only")
            train_pass(client, store, train, spaces, weights, adversarial=False)
            gold_passes.append(
                {"epoch": epoch, "reads": weights.reads, "credited": weights.credited}
                | weights.summary()
            )
            if epoch in (1, args.gold_epochs):
                passes = f"{epoch} gold pass{'es' if epoch > 1 else ''}"
                rows[f"held-out, after {passes}"] = measure(
                    client, store, held_out, spaces, weights.learned
                )
                rows[f"train, after {passes} (same queries)"] = measure(
                    client, store, train, spaces, weights.learned
                )
        for epoch in range(1, args.epochs + 1):
            train_pass(client, store, train, spaces, weights, adversarial=True)
            trajectory.append({"epoch": epoch, "reads": weights.reads, **weights.summary()})
            progress.note(f"runaway epoch {epoch}: {trajectory[-1]}")
            if epoch in MEASURE_AT or epoch == args.epochs:
                label = f"held-out, after {epoch} adversarial epochs"
                rows[label] = measure(client, store, held_out, spaces, weights.learned)
        rows[f"train, after {args.epochs} adversarial epochs"] = measure(
            client, store, train, spaces, weights.learned
        )

    overlap = gold_overlap(train, held_out)
    print(
        f"## {args.file.name} (--keys {mode}, {len(train)} train / {len(held_out)} held-out "
        f"queries, limit {args.limit}; held-out queries sharing a gold memory with train: "
        f"{overlap:.2f})"
    )
    head = ["queries", "recall@5", "recall@10", "all@5", "MRR", "inject hit@2"]
    head += ["matched a learned key", "reached gold by one"]
    print("| split, point | " + " | ".join(head) + " |")
    print("|---|" + "---:|" * len(head))
    for label, row in rows.items():
        print(row.row(label))
    learned_head = "learned links | max learned / memory | max learned weight"
    print(
        "\n| gold pass | reads | credited | links changed | max weight | max / start | "
        f"{learned_head} |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for point in gold_passes:
        print(
            f"| {point['epoch']} | {point['reads']} | {point['credited']} | {point['links']} | "
            f"{point['max_weight']:.3f} | {point['max_ratio']:.3f} | {learned_cells(point)} |"
        )
    print()
    print(
        "| adversarial epoch | reads | links changed | max weight | max / start | mean ratio | "
        f"{learned_head} |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for point in trajectory:
        print(
            f"| {point['epoch']} | {point['reads']} | {point['links']} | "
            f"{point['max_weight']:.3f} | {point['max_ratio']:.3f} | {point['mean_ratio']:.3f} | "
            f"{learned_cells(point)} |"
        )
    errors = {label: row.errors for label, row in rows.items() if row.errors}
    print(f"errors: {errors or 'none'}; wall {time.monotonic() - started:.0f} s")
    if args.json:
        out = {
            "file": args.file.name,
            "keys": mode,
            "train": len(train),
            "held_out": len(held_out),
            "gold_overlap": overlap,
            "rows": {label: row.to_dict() for label, row in rows.items()},
            "gold_passes": gold_passes,
            "trajectory": trajectory,
        }
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
