"""Calibrate the cosine thresholds of the configured embedding model on real pairs.

    python -m keymem.services.embedder.calibrate [--data ../shared/data] [--json]

Uses whatever EMBEDDING_BACKEND / LOCAL_EMBEDDING_MODEL the environment selects (USE-m by
default), so a new model gets its own profile by running this once. Pair sets:

- ``calibration_keys.json`` (beside this file, always present): one concept in English, Korean
  and Japanese (synonyms that may merge), two spellings in one language, and *near misses*:
  distinct concepts of one domain (strawberry/blueberry, 월급/보너스) that must never merge;
  unrelated pairs are drawn from different concepts with a fixed seed.
- from the benchmark files when present (never copied into the repo): HotpotQA questions
  against the titles of their own ten paragraphs (gold titles related, the rest hard
  negatives) and against other questions' titles (random negatives); the blind-key set's
  questions against each paragraph's agent-written keys (best key per paragraph); KoBLEX
  English questions against Korean statute titles, texts, and titles over texts (what search
  reads across scripts; cross-lingual).

Rules (docs/CALIBRATION.md explains them): ``key_merge`` sits above 99% of near misses and
99.9% of unrelated pairs; ``short_key_merge`` above every near miss; ``key_recall`` is the
lowest cosine that lets at most ``RECALL_MAX_FPR`` of hard negatives through; ``alias_floor``
lets at most 1% of random question/key pairs through.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from keymem.services.config import HOME, load
from keymem.services.embedder.backends import EmbeddingBackend, Kind, fingerprint, load_backend
from keymem.services.embedder.settings import EmbedderSettings
from keymem.services.memory.search import named_text

FIXTURE = Path(__file__).with_name("calibration_keys.json")
DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
SEED = 20261129
UNRELATED_PAIRS = 400
KOBLEX_NEGATIVES_PER_QUERY = 5
PASSAGE_CHARS = 1000  # the reranker's cut, so passage cosines match what it scores
PERCENTILES = (0.05, 0.25, 0.50, 0.75, 0.95, 0.99)
RECALL_MAX_FPR = 0.05
ALIAS_MAX_FPR = 0.01
SHORT_MAX_CHARS = 15  # the original's "short concept": <= 2 tokens or <= 15 characters
SHORT_MAX_WORDS = 2

Pair = tuple[str, str]


@dataclass
class PairSet:
    name: str
    kinds: tuple[Kind, Kind]
    pairs: list[Pair]
    scores: list[float] | None = None

    def percentile(self, q: float) -> float:
        assert self.scores is not None
        return float(np.quantile(self.scores, q))

    def rate_at_or_above(self, threshold: float) -> float:
        assert self.scores is not None
        return float(np.mean(np.asarray(self.scores) >= threshold))


def is_short(text: str) -> bool:
    return len(text) <= SHORT_MAX_CHARS or len(text.split()) <= SHORT_MAX_WORDS


def fixture_sets(path: Path = FIXTURE) -> list[PairSet]:
    data = json.loads(path.read_text())
    groups: list[list[str]] = data["synonym_groups"]
    cross = [(g[i], g[j]) for g in groups for i in range(len(g)) for j in range(i + 1, len(g))]
    same = [(a, b) for a, b in data["same_language_synonyms"]]
    near = [(a, b) for a, b in data["near_misses"]]
    rng = random.Random(SEED)
    unrelated: list[Pair] = []
    while len(unrelated) < UNRELATED_PAIRS:
        g1, g2 = rng.sample(range(len(groups)), 2)
        unrelated.append((rng.choice(groups[g1]), rng.choice(groups[g2])))
    key: tuple[Kind, Kind] = ("key", "key")
    return [
        PairSet("synonyms, cross-lingual (ko/en/ja)", key, cross),
        PairSet("synonyms, same language", key, same),
        PairSet("near misses (distinct, same domain)", key, near),
        PairSet(
            "near misses, both short", key, [p for p in near if is_short(p[0]) and is_short(p[1])]
        ),
        PairSet("unrelated keys", key, unrelated),
    ]


def _load(data_dir: Path, name: str) -> dict[str, Any] | None:
    path = data_dir / name
    if not path.is_file():
        return None
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def benchmark_sets(data_dir: Path) -> list[PairSet]:
    sets: list[PairSet] = []
    qk: tuple[Kind, Kind] = ("query", "key")
    rng = random.Random(SEED)
    hotpot = _load(data_dir, "hotpot_per_query.dev.json")
    if hotpot is not None:
        titles = {m["id"]: m["title"] for m in hotpot["memories"]}
        all_titles = sorted(set(titles.values()))
        gold: list[Pair] = []
        hard: list[Pair] = []
        random_pairs: list[Pair] = []
        for q in hotpot["queries"]:
            own = {titles[i] for i in q["memory_ids"]}
            for mid in q["memory_ids"]:
                (gold if mid in q["gold"] else hard).append((q["query"], titles[mid]))
            while True:
                other = rng.choice(all_titles)
                if other not in own:
                    random_pairs.append((q["query"], other))
                    break
        sets += [
            PairSet("hotpot question -> gold title", qk, gold),
            PairSet("hotpot question -> other title in its 10 (hard)", qk, hard),
            PairSet("hotpot question -> random title", qk, random_pairs),
        ]
    blind = _load(data_dir, "hotpot_blindkeys40.dev.json")
    if blind is not None:
        keys = {m["id"]: m["keys"] or [] for m in blind["memories"]}
        gold_k: list[Pair] = []
        hard_k: list[Pair] = []
        for q in blind["queries"]:
            for mid in q["memory_ids"]:
                target = gold_k if mid in q["gold"] else hard_k
                target += [(q["query"], k) for k in keys[mid]]
        sets += [
            PairSet("blind keys: question -> key of a gold paragraph", qk, gold_k),
            PairSet("blind keys: question -> key of another paragraph (hard)", qk, hard_k),
        ]
    koblex = _load(data_dir, "koblex_crosslingual.dev.json")
    if koblex is not None:
        memories = {m["id"]: m for m in koblex["memories"]}
        ids = sorted(memories)
        title_pos, title_neg, text_pos, text_neg = [], [], [], []
        named_pos, named_neg = [], []
        for q in koblex["queries"]:
            negatives = [
                i for i in rng.sample(ids, KOBLEX_NEGATIVES_PER_QUERY + 3) if i not in q["gold"]
            ]
            for mid in q["gold"]:
                title_pos.append((q["query"], memories[mid]["title"]))
                text_pos.append((q["query"], memories[mid]["content"][:PASSAGE_CHARS]))
                named_pos.append((q["query"], _named(memories[mid])))
            for mid in negatives[:KOBLEX_NEGATIVES_PER_QUERY]:
                title_neg.append((q["query"], memories[mid]["title"]))
                text_neg.append((q["query"], memories[mid]["content"][:PASSAGE_CHARS]))
                named_neg.append((q["query"], _named(memories[mid])))
        qp: tuple[Kind, Kind] = ("query", "passage")
        sets += [
            PairSet("koblex EN question -> KO gold statute title", qk, title_pos),
            PairSet("koblex EN question -> KO random statute title", qk, title_neg),
            PairSet("koblex EN question -> KO gold statute text", qp, text_pos),
            PairSet("koblex EN question -> KO random statute text", qp, text_neg),
            PairSet("koblex EN question -> KO gold statute named text", qp, named_pos),
            PairSet("koblex EN question -> KO random statute named text", qp, named_neg),
        ]
    return sets


def _named(memory: dict[str, Any]) -> str:
    """A statute as search reads it across scripts: its title over its text (``named_text``)."""
    return named_text(memory["title"], memory["content"])[:PASSAGE_CHARS]


def score_sets(backend: EmbeddingBackend, sets: Iterable[PairSet], batch: int = 64) -> None:
    """Fill each set's cosines; every distinct (kind, text) is embedded once."""
    needed: dict[Kind, set[str]] = {}
    for s in sets:
        for a, b in s.pairs:
            needed.setdefault(s.kinds[0], set()).add(a)
            needed.setdefault(s.kinds[1], set()).add(b)
    vectors: dict[tuple[Kind, str], np.ndarray] = {}
    for kind, texts in needed.items():
        ordered = sorted(texts)
        for start in range(0, len(ordered), batch):
            chunk = [t[: backend.max_chars] for t in ordered[start : start + batch]]
            encoded = backend.encode(chunk, kind).vectors
            for text, row in zip(ordered[start : start + batch], encoded, strict=True):
                vectors[(kind, text)] = row
    for s in sets:
        s.scores = [float(vectors[(s.kinds[0], a)] @ vectors[(s.kinds[1], b)]) for a, b in s.pairs]


def _up(value: float) -> float:
    """Round up to the next hundredth: thresholds are reported and compared at 0.01."""
    return math.ceil(value * 100 - 1e-9) / 100


def _lowest_threshold(negatives: Sequence[float], max_rate: float) -> float:
    ordered = np.sort(np.asarray(negatives))
    for step in range(0, 101):
        t = step / 100
        if np.mean(ordered >= t) <= max_rate:
            return t
    return 1.0


def choose(sets: dict[str, PairSet]) -> dict[str, Any]:
    near = sets["near misses (distinct, same domain)"]
    short_near = sets["near misses, both short"]
    unrelated = sets["unrelated keys"]
    assert near.scores and short_near.scores and unrelated.scores
    key_merge = _up(max(near.percentile(0.99), unrelated.percentile(0.999)))
    short_key_merge = max(key_merge, _up(max(short_near.scores) + 0.005))
    hard = [s for name, ps in sets.items() if "(hard)" in name and ps.scores for s in ps.scores]
    random_neg = [
        s
        for name, ps in sets.items()
        if ("random title" in name or name == "unrelated keys") and ps.scores
        for s in ps.scores
    ]
    gold = [
        s
        for name, ps in sets.items()
        if "gold paragraph" in name or "gold title" in name
        if ps.scores and not name.startswith("koblex")
        for s in ps.scores
    ]
    key_recall = _lowest_threshold(hard, RECALL_MAX_FPR) if hard else None
    alias_floor = _lowest_threshold(random_neg, ALIAS_MAX_FPR)
    if key_recall is not None:
        alias_floor = min(alias_floor, key_recall)
    return {
        "key_merge": key_merge,
        "short_key_merge": short_key_merge,
        "key_recall": key_recall,
        "alias_floor": alias_floor,
        # not a profile value: where recall would sit if misses and false hits cost the same
        "reference_balanced_recall": _balanced(gold, hard) if gold and hard else None,
    }


def _balanced(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """The threshold maximising TPR - FPR (Youden's J)."""
    pos, neg = np.asarray(positives), np.asarray(negatives)
    grid = [step / 100 for step in range(-20, 101)]
    return max(grid, key=lambda t: float(np.mean(pos >= t) - np.mean(neg >= t)))


def report(backend: EmbeddingBackend, sets: list[PairSet], chosen: dict[str, Any]) -> str:
    head = "| pair set | n | " + " | ".join(f"p{round(q * 100)}" for q in PERCENTILES) + " |"
    lines = [
        f"model: `{fingerprint(backend)}`",
        "",
        head,
        "|---|---:|" + "---:|" * len(PERCENTILES),
    ]
    for s in sets:
        if not s.pairs:
            continue
        cells = " | ".join(f"{s.percentile(q):.3f}" for q in PERCENTILES)
        lines.append(f"| {s.name} | {len(s.pairs)} | {cells} |")
    lines += ["", "| threshold | value |", "|---|---:|"]
    for name, value in chosen.items():
        if value is None:
            continue
        lines.append(f"| {name} | {value:.2f} |")
    lines += [
        "",
        "| pair set | " + " | ".join(n for n, v in chosen.items() if v is not None) + " |",
    ]
    lines.append("|---|" + "---:|" * sum(v is not None for v in chosen.values()))
    for s in sets:
        if s.pairs and s.scores:
            rates = " | ".join(
                f"{s.rate_at_or_above(v):.1%}" for v in chosen.values() if v is not None
            )
            lines.append(f"| {s.name} | {rates} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="benchmark files")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    config = load()
    backend = load_backend(EmbedderSettings.from_config(config), config[HOME])
    sets = fixture_sets() + benchmark_sets(args.data)
    if len(sets) == len(fixture_sets()):
        print(f"note: no benchmark files under {args.data}; fixture pairs only", file=sys.stderr)
    score_sets(backend, sets)
    chosen = choose({s.name: s for s in sets})
    if args.json:
        out = {
            "fingerprint": fingerprint(backend),
            "thresholds": chosen,
            "sets": {
                s.name: {
                    "n": len(s.pairs),
                    **{f"p{round(q * 100)}": round(s.percentile(q), 4) for q in PERCENTILES},
                }
                for s in sets
                if s.pairs
            },
        }
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        print(report(backend, sets, chosen))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
