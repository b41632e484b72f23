"""Ranking metrics, defined exactly as ../shared/data/README.md does so figures compare.

recall@k: share of a query's gold in its top k; all@k: every gold in the top k ("both@k" for
two-gold HotpotQA); hit@k: any gold in the top k; MRR: 1 / rank of the first gold (0 if none
is ranked at all). Only answerable queries (non-empty gold) are scored; the others are a
separate figure, the not-found rate of the inject path. Scores are averaged per query, overall
and per query type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field


def recall_at(ranking: Sequence[str], gold: Iterable[str], k: int) -> float:
    wanted = set(gold)
    return len(wanted.intersection(ranking[:k])) / len(wanted)


def all_at(ranking: Sequence[str], gold: Iterable[str], k: int) -> float:
    return 1.0 if set(gold) <= set(ranking[:k]) else 0.0


def hit_at(ranking: Sequence[str], gold: Iterable[str], k: int) -> float:
    return 1.0 if set(gold).intersection(ranking[:k]) else 0.0


def reciprocal_rank(ranking: Sequence[str], gold: Iterable[str]) -> float:
    wanted = set(gold)
    for position, memory_id in enumerate(ranking, start=1):
        if memory_id in wanted:
            return 1.0 / position
    return 0.0


@dataclass(frozen=True)
class Scores:
    """The mean metrics of a group of queries (one method, all queries or one type)."""

    queries: int
    recall: Mapping[int, float]
    all: Mapping[int, float]
    hit: Mapping[int, float]
    mrr: float

    def to_dict(self) -> dict[str, object]:
        return {
            "queries": self.queries,
            "recall": {str(k): v for k, v in self.recall.items()},
            "all": {str(k): v for k, v in self.all.items()},
            "hit": {str(k): v for k, v in self.hit.items()},
            "mrr": self.mrr,
        }


@dataclass
class ScoreSheet:
    """Per-query metrics accumulated as rankings come in; ``summary`` averages them."""

    ks: tuple[int, ...]
    _rows: list[tuple[str, dict[str, float]]] = field(default_factory=list)

    def add(self, query_type: str, ranking: Sequence[str], gold: Sequence[str]) -> None:
        if not gold:
            raise ValueError("a query with empty gold is not scored (see the not-found rate)")
        row = {"mrr": reciprocal_rank(ranking, gold)}
        for k in self.ks:
            row[f"recall@{k}"] = recall_at(ranking, gold, k)
            row[f"all@{k}"] = all_at(ranking, gold, k)
            row[f"hit@{k}"] = hit_at(ranking, gold, k)
        self._rows.append((query_type, row))

    def summary(self, query_type: str | None = None) -> Scores:
        rows = [r for t, r in self._rows if query_type is None or t == query_type]

        def mean(name: str) -> float:
            return sum(r[name] for r in rows) / len(rows) if rows else 0.0

        return Scores(
            queries=len(rows),
            recall={k: mean(f"recall@{k}") for k in self.ks},
            all={k: mean(f"all@{k}") for k in self.ks},
            hit={k: mean(f"hit@{k}") for k in self.ks},
            mrr=mean("mrr"),
        )

    def types(self) -> list[str]:
        return sorted({t for t, _ in self._rows})
