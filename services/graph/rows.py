"""What a sound graph row is: one set of rules for start-up and for ``keymem import``.

At start-up a row that would break the in-memory graph (a key vector of another dimension, a
non-finite number, a version chain that loops, a link to nothing) is quarantined: left out of
the in-memory state, logged, and reported by the graph's ``quarantine`` method and ``keymem
doctor``, so one damaged row never keeps the graph from starting. An import is held to the same
rules plus the limits a write must meet (``strict``), and a file that breaks any of them is
refused whole, before its transaction, with one line naming the row and the problem.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from keymem.protocol.limits import (
    CONTENT_MAX_CHARS,
    ID_MAX_CHARS,
    KEY_MAX_CHARS,
    NAMESPACE_MAX_CHARS,
)
from keymem.services.graph.state import DEPTH_MAX, DEPTH_MIN, LINK_WEIGHT_MAX, LINK_WEIGHT_MIN
from keymem.services.graph.text import normalize_namespace, usable_key
from keymem.store.database import LoadedGraph
from keymem.store.records import (
    DECAY_PROFILES,
    EVIDENCE_TYPES,
    KEY_TYPES,
    KeyRecord,
    LinkRecord,
    MemoryRecord,
)

# Rows the quarantine lists in full; beyond this only the count grows.
QUARANTINE_LISTED_MAX = 100
# Key vectors checked this many at a time at start-up (bounds the temporary arrays).
SCREEN_ROWS = 8192

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Quarantined:
    table: str
    row: str  # the row's id (a link's is key_id/memory_id)
    reason: str

    def to_wire(self) -> dict[str, str]:
        return {"table": self.table, "row": self.row, "reason": self.reason}


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def id_problem(value: Any) -> str | None:
    if not isinstance(value, str) or not 0 < len(value) <= ID_MAX_CHARS:
        return f"an id must be a string of 1..{ID_MAX_CHARS} characters, got {value!r:.80}"
    return None


def namespace_problem(namespace: str) -> str | None:
    if len(namespace) > NAMESPACE_MAX_CHARS or namespace != normalize_namespace(namespace):
        return f"namespace {namespace!r:.80} is not normalised (trimmed, lower-case, non-empty)"
    return None


def key_problem(key: KeyRecord, dim: int | None, *, strict: bool) -> str | None:
    vector = key.vector
    if dim is not None and vector.shape != (dim,):
        return f"key vector has dimension {vector.size}, this graph stores {dim}"
    if vector.size == 0 or not np.all(np.isfinite(vector)) or not np.any(vector):
        return "key vector must be finite, non-empty and not all zeros"
    if not _finite(key.created_at):
        return "created_at must be a finite number"
    if key.key_type not in KEY_TYPES:
        return f"key_type must be one of {', '.join(KEY_TYPES)}"
    if strict:
        if not usable_key(key.concept) or len(key.concept) > KEY_MAX_CHARS:
            return f"concept must be a usable key of at most {KEY_MAX_CHARS} characters"
        return namespace_problem(key.namespace)
    return None


def _source_problem(text: str | None, name: str) -> str | None:
    if text is None:
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        return f"{name} must be JSON text of an object"
    return None if isinstance(parsed, dict) else f"{name} must be JSON text of an object"


def memory_problem(memory: MemoryRecord, *, strict: bool) -> str | None:
    if not _finite(memory.depth) or not DEPTH_MIN <= memory.depth <= DEPTH_MAX:
        return f"depth must be a finite number in [{DEPTH_MIN}, {DEPTH_MAX}], got {memory.depth}"
    for name in ("created_at", "last_accessed", "last_confirmed_at"):
        if not _finite(getattr(memory, name)):
            return f"{name} must be a finite number"
    if memory.expires_at is not None and not _finite(memory.expires_at):
        return "expires_at must be a finite number or null"
    if memory.decay_profile not in DECAY_PROFILES:
        return f"decay_profile must be one of {', '.join(DECAY_PROFILES)}"
    if memory.access_count < 0 or memory.confirmation_count < 0:
        return "access_count and confirmation_count must not be negative"
    if memory.supersedes == memory.id or memory.superseded_by == memory.id:
        return "a memory cannot supersede itself"
    if not strict:
        return None
    if not memory.content.strip() or len(memory.content) > CONTENT_MAX_CHARS:
        return (
            f"content has {len(memory.content)} characters; it must be non-empty and at "
            f"most {CONTENT_MAX_CHARS}"
        )
    evidence = memory.last_confirmation_evidence
    if evidence is not None and evidence not in EVIDENCE_TYPES:
        return f"last_confirmation_evidence must be one of {', '.join(EVIDENCE_TYPES)}"
    return (
        namespace_problem(memory.namespace)
        or _source_problem(memory.source, "source")
        or _source_problem(memory.last_confirmation_source, "last_confirmation_source")
    )


def link_problem(link: LinkRecord) -> str | None:
    if not _finite(link.weight) or not LINK_WEIGHT_MIN <= link.weight <= LINK_WEIGHT_MAX:
        return (
            f"link weight must be a finite number in [{LINK_WEIGHT_MIN}, {LINK_WEIGHT_MAX}], "
            f"got {link.weight}"
        )
    return None


def chain_cycles(next_of: Mapping[str, str | None]) -> set[str]:
    """The memories on a ``superseded_by`` loop (a version chain must end in a head)."""
    state: dict[str, int] = {}  # 1: on the current walk, 2: known to reach a head
    looped: set[str] = set()
    for start in next_of:
        walk: list[str] = []
        current: str | None = start
        while current is not None and current in next_of and state.get(current) is None:
            state[current] = 1
            walk.append(current)
            current = next_of[current]
        if current is not None and state.get(current) == 1:
            looped.update(walk[walk.index(current) :])
        for memory_id in walk:
            state[memory_id] = 2
    return looped


def _finite_column(column: np.ndarray) -> np.ndarray:
    """Per row: a number that is not NULL, NaN or infinite."""
    values = np.asarray(np.ma.getdata(column), dtype=np.float64)
    ok: np.ndarray = np.isfinite(values) & ~np.ma.getmaskarray(column)
    return ok


def _one_of(column: np.ndarray, allowed: tuple[str, ...]) -> np.ndarray:
    ok: np.ndarray = np.isin(np.ma.getdata(column), allowed) & ~np.ma.getmaskarray(column)
    return ok


def _flagged(rows: list[T], ok: np.ndarray) -> list[T]:
    return [rows[i] for i in np.flatnonzero(~ok)]


def _key_suspects(loaded: LoadedGraph, dim: int | None) -> list[KeyRecord]:
    """The keys that may break a rule: those a column check flags, or every key when the
    vectors did not load as their namespaces' matrices of the graph's dimension."""
    keys = list(loaded.keys.values())
    matrices, columns = loaded.key_matrices, loaded.key_columns
    counts = Counter(key.namespace for key in keys)  # the records come grouped by namespace
    if not columns or counts.keys() != matrices.keys():
        return keys
    ok = _finite_column(columns["created_at"]) & _one_of(columns["key_type"], KEY_TYPES)
    start = 0
    for namespace, count in counts.items():
        matrix = matrices[namespace]
        if matrix.shape[1] != dim:
            return keys
        for first in range(0, count, SCREEN_ROWS):
            block = matrix[first : min(count, first + SCREEN_ROWS)]
            at = start + first
            ok[at : at + len(block)] &= np.isfinite(block).all(axis=1) & block.any(axis=1)
        start += count
    return _flagged(keys, ok)


def _memory_suspects(loaded: LoadedGraph) -> list[MemoryRecord]:
    """The memories that may break a rule (``memory_problem`` decides), by column."""
    memories = list(loaded.memories.values())
    columns = loaded.memory_columns
    if not columns or len(columns["id"]) != len(memories):
        return memories
    depth = np.ma.getdata(columns["depth"])
    ok = _finite_column(columns["depth"]) & (depth >= DEPTH_MIN) & (depth <= DEPTH_MAX)
    for name in ("created_at", "last_accessed", "last_confirmed_at"):
        ok &= _finite_column(columns[name])
    ok &= np.ma.getmaskarray(columns["expires_at"]) | _finite_column(columns["expires_at"])
    ok &= _one_of(columns["decay_profile"], DECAY_PROFILES)
    for name in ("access_count", "confirmation_count"):
        ok &= np.ma.getdata(columns[name]) >= 0
    ids = np.ma.getdata(columns["id"])
    for name in ("supersedes", "superseded_by"):
        ok &= np.ma.getmaskarray(columns[name]) | (np.ma.getdata(columns[name]) != ids)
    return _flagged(memories, ok)


def _link_reason(loaded: LoadedGraph, link: LinkRecord) -> str | None:
    key, memory = loaded.keys.get(link.key_id), loaded.memories.get(link.memory_id)
    if key is None or memory is None:
        return "its key or memory is missing or quarantined"
    if key.namespace != memory.namespace:
        return "its key and memory are in different namespaces"
    return link_problem(link)


def _quarantine_links(loaded: LoadedGraph, ends_taken: bool) -> list[Quarantined]:
    """Take out the links to a missing end, across namespaces or with a bad weight, checking
    each column at once and explaining only the rows it takes. ``ends_taken``: keys or
    memories were quarantined, so the ends the file had are checked again."""
    links = loaded.links
    weight = links.weight
    ok = np.isfinite(weight) & (weight >= LINK_WEIGHT_MIN) & (weight <= LINK_WEIGHT_MAX)
    ok &= loaded.link_ends_sound
    if ends_taken:
        keys, memories = loaded.keys, loaded.memories
        ok &= np.fromiter(
            (
                k in keys and m in memories
                for k, m in zip(links.key_id.tolist(), links.memory_id.tolist(), strict=True)
            ),
            dtype=bool,
            count=len(links),
        )
    out: list[Quarantined] = []
    for row in np.flatnonzero(~ok).tolist():
        link = links.record(row)
        why = _link_reason(loaded, link)
        if why is None:
            ok[row] = True
        else:
            out.append(Quarantined("links", f"{link.key_id}/{link.memory_id}", why))
    if out:
        loaded.links = links.take(ok)
    return out


def quarantine(loaded: LoadedGraph) -> list[Quarantined]:
    """Take every unsound row out of ``loaded`` (in place); returns what was taken and why."""
    dim = int(loaded.meta["dim"]) if loaded.meta.get("dim") else None
    if dim is None and loaded.keys:  # no dimension recorded: the one most keys have
        dim = Counter(k.vector.size for k in loaded.keys.values()).most_common(1)[0][0]
    out: list[Quarantined] = []
    for key in _key_suspects(loaded, dim):
        if (reason := key_problem(key, dim, strict=False)) is not None:
            out.append(Quarantined("keys", key.id, reason))
            del loaded.keys[key.id]
    for memory in _memory_suspects(loaded):
        if (reason := memory_problem(memory, strict=False)) is not None:
            out.append(Quarantined("memories", memory.id, reason))
            del loaded.memories[memory.id]
    chains = {m.id: m.superseded_by for m in loaded.memories.values() if m.superseded_by}
    for memory_id in sorted(chain_cycles(chains)):
        out.append(Quarantined("memories", memory_id, "its version chain loops (superseded_by)"))
        del loaded.memories[memory_id]
    out.extend(_quarantine_links(loaded, ends_taken=bool(out)))
    return out


def listed(quarantined: Iterable[Quarantined]) -> dict[str, Any]:
    """The quarantine as the graph reports it: a count and the first rows with their reasons."""
    rows = list(quarantined)
    return {"count": len(rows), "rows": [q.to_wire() for q in rows[:QUARANTINE_LISTED_MAX]]}
