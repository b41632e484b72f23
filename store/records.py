"""Rows of the graph as Python objects: what the store loads and what the service mutates.

Plain slotted dataclasses: 100k memories and half a million links must fit in memory cheaply,
and the service keeps them as its authoritative read state between commits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

KEY_TYPES = ("concept", "name", "proper_noun")
DECAY_PROFILES = ("transient", "standard", "stable", "permanent")
EVIDENCE_TYPES = ("user", "authoritative_source", "observation")

T = TypeVar("T")


def to_json(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)


def from_json(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    parsed = json.loads(text)
    return parsed if isinstance(parsed, dict) else None


@dataclass(slots=True)
class KeyAlias:
    alias: str
    learned: bool = False
    added_at: float = 0.0
    hits: int = 0
    last_hit_at: float = 0.0


@dataclass(slots=True)
class AliasCandidate:
    query: str
    count: int
    last_seen: float


@dataclass(slots=True)
class KeyRecord:
    id: str
    namespace: str
    concept: str
    key_type: str
    created_at: float
    vector: np.ndarray
    row: int = -1  # its position among the rows the graph loaded (-1: written since)
    aliases: list[KeyAlias] = field(default_factory=list)
    # (normalised query) -> candidate; learned-alias heat from confirmed reads (autokey)
    candidates: dict[str, AliasCandidate] = field(default_factory=dict)

    @property
    def is_entity(self) -> bool:
        return self.key_type != "concept"

    def surfaces(self) -> list[str]:
        return [self.concept, *(a.alias for a in self.aliases)]


@dataclass(slots=True)
class MemoryRecord:
    id: str
    namespace: str
    content: str
    created_at: float
    source: str | None = None  # JSON text; parsed only when a view shows it
    supersedes: str | None = None
    superseded_by: str | None = None
    depth: float = 0.0
    access_count: int = 0
    last_accessed: float = 0.0
    expires_at: float | None = None
    last_confirmed_at: float = 0.0
    confirmation_count: int = 1
    decay_profile: str = "standard"
    last_confirmation_evidence: str | None = "user"
    last_confirmation_source: str | None = None  # JSON text
    last_confirmation_id: str | None = None
    row: int = -1  # its position among the rows the graph loaded (-1: written since)
    # Tuples, not lists: most memories have none, and () is one shared object.
    related_to: tuple[str, ...] = ()
    contradicts: tuple[str, ...] = ()
    near_duplicates: tuple[str, ...] = ()  # flagged by a sleep pass

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def active(self, now: float) -> bool:
        return self.superseded_by is None and not self.expired(now)


@dataclass(slots=True)
class LinkRecord:
    key_id: str
    memory_id: str
    weight: float = 1.0
    auto: bool = False
    # Made by hook learning (an association the agent's reads taught), not written with the
    # memory (services/graph/feedback.py).
    learned: bool = False


@dataclass(slots=True)
class LinkColumns:
    """Links as the store loads them: one array per column, row i of each is one link.

    The graph checks them a column at a time at start-up and keeps the rows it accepts as
    columns (services/graph/links.py).
    """

    key_id: np.ndarray  # object array of str
    memory_id: np.ndarray  # object array of str
    weight: np.ndarray  # float64
    auto: np.ndarray  # bool
    learned: np.ndarray  # bool
    # the position of each end among the loaded keys / memories (-1: not loaded)
    key_row: np.ndarray
    memory_row: np.ndarray

    @classmethod
    def empty(cls) -> LinkColumns:
        ids = np.empty(0, dtype=object)
        flags = np.empty(0, dtype=bool)
        rows = np.empty(0, dtype=np.int64)
        return cls(ids, ids, np.empty(0), flags, flags, rows, rows)

    def __len__(self) -> int:
        return len(self.key_id)

    def take(self, rows: np.ndarray) -> LinkColumns:
        """The links at ``rows`` (a boolean mask or indices), in order."""
        return LinkColumns(
            self.key_id[rows],
            self.memory_id[rows],
            self.weight[rows],
            self.auto[rows],
            self.learned[rows],
            self.key_row[rows],
            self.memory_row[rows],
        )

    def record(self, row: int) -> LinkRecord:
        return LinkRecord(
            self.key_id[row],
            self.memory_id[row],
            float(self.weight[row]),
            bool(self.auto[row]),
            bool(self.learned[row]),
        )


def shared(values: list[T]) -> list[T]:
    """``values`` with equal values as one object: a namespace repeated on every row is one
    string, the default link weight one float."""
    seen: dict[T, T] = {}
    return [seen.setdefault(value, value) for value in values]


def shared_column(column: np.ndarray) -> list[Any]:
    """``shared(column.tolist())`` for a fetched column (a masked array where it holds NULLs),
    without a Python step per row when every row holds one value or none: most of a memory's
    bookkeeping columns (never superseded, never confirmed, one namespace), 13 of them on
    every memory at load (1.8 s of CPU at 1M the row-by-row way)."""
    if len(column):
        mask = np.ma.getmaskarray(column)
        if mask.all():
            return [None] * len(column)
        if not mask.any():
            data = np.ma.getdata(column)
            if bool((data == data[0]).all()):
                first: list[Any] = data[:1].tolist()
                return first * len(column)
    return shared(column.tolist())


@dataclass(frozen=True, slots=True)
class Outcome:
    """The committed result of a keyed write (services/graph/idempotency.py)."""

    method: str
    result: bytes  # msgpack, as protocol.codec packs it
    committed_at: float
