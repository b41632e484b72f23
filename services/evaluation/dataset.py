"""Benchmark files (the format of ../shared/data/README.md), loaded and checked before any work.

A malformed file must fail in the first second with the field that is wrong, not after the
services have been started and half the store written: every check here runs on the parsed
JSON before anything else happens. The dataclasses are what the rest of the harness sees, so
the metrics, baselines and loader never touch raw JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Setting = Literal["pooled", "per_query"]
SETTINGS: tuple[Setting, ...] = ("pooled", "per_query")
# The namespace a pooled memory or query without one lives in (the product's default too).
DEFAULT_NAMESPACE = "default"
# What a memory's ``key_types`` may say about one of its keys (the graph's entity key types).
KEY_TYPES = ("name", "proper_noun")


class DatasetError(ValueError):
    """The benchmark file cannot be used; the message names the file, the record and the field."""


@dataclass(frozen=True)
class Memory:
    id: str
    content: str
    title: str | None
    keys: tuple[str, ...] | None
    namespace: str
    # key -> "name" | "proper_noun" for the keys an agent typed as entities
    key_types: Mapping[str, str] = field(default_factory=dict)

    @property
    def document(self) -> str:
        """What the baselines index: title and content (BASELINES.md: "over title + content")."""
        return f"{self.title}\n{self.content}" if self.title else self.content

    @property
    def keyed_document(self) -> str:
        """The document with the memory's keys appended: what a flat store indexes when it
        keeps the agent's keywords too (the ``+keys`` baselines)."""
        return f"{self.document}\n{' '.join(self.keys)}" if self.keys else self.document


@dataclass(frozen=True)
class Query:
    id: str
    query: str
    gold: tuple[str, ...]
    gold_all_required: bool
    type: str
    memory_ids: tuple[str, ...] | None
    namespace: str

    @property
    def answerable(self) -> bool:
        """False for ``gold: []``: the answer is not in the store and nothing should surface."""
        return bool(self.gold)


@dataclass(frozen=True)
class Benchmark:
    name: str
    setting: Setting
    memories: tuple[Memory, ...]
    queries: tuple[Query, ...]

    _pools: dict[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        grouped: dict[str, list[str]] = {}
        for memory in self.memories:
            grouped.setdefault(memory.namespace, []).append(memory.id)
        object.__setattr__(self, "_pools", {ns: tuple(ids) for ns, ids in grouped.items()})

    @property
    def has_keys(self) -> bool:
        return any(m.keys for m in self.memories)

    @property
    def has_titles(self) -> bool:
        return any(m.title for m in self.memories)

    def candidates(self, query: Query) -> tuple[str, ...]:
        """The memory ids a query may be answered from, in file order.

        per_query: its own ``memory_ids`` (a fresh ~10-paragraph store per question); pooled:
        every memory in the query's namespace.
        """
        if self.setting == "per_query":
            assert query.memory_ids is not None  # validated
            return query.memory_ids
        return self._pools.get(query.namespace, ())

    def limited(self, count: int) -> Benchmark:
        """The first ``count`` queries (and, for per_query files, only the memories they use)."""
        queries = self.queries[:count]
        if self.setting == "pooled":
            return Benchmark(self.name, self.setting, self.memories, queries)
        used = {m for q in queries for m in q.memory_ids or ()}
        memories = tuple(m for m in self.memories if m.id in used)
        return Benchmark(self.name, self.setting, memories, queries)


# -- parsing ------------------------------------------------------------------------------------
class _Record:
    """One JSON object being read, so that every error names where it came from."""

    def __init__(self, raw: Any, where: str) -> None:
        if not isinstance(raw, Mapping):
            raise DatasetError(f"{where}: expected an object, got {type(raw).__name__}")
        self.raw = raw
        self.where = where

    def error(self, name: str, problem: str) -> DatasetError:
        return DatasetError(f"{self.where}: {name!r} {problem}")

    def text(self, name: str, *, required: bool = True) -> str:
        value = self.raw.get(name)
        if not isinstance(value, str) or (required and not value.strip()):
            raise self.error(name, "must be a non-empty string")
        return value

    def optional_text(self, name: str) -> str | None:
        value = self.raw.get(name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(name, "must be a string or null")
        return value if value.strip() else None

    def id_list(self, name: str, *, optional: bool = False) -> tuple[str, ...] | None:
        value = self.raw.get(name)
        if value is None and optional:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.error(name, "must be a list of id strings")
        return tuple(value)

    def namespace(self) -> str:
        return self.optional_text("namespace") or DEFAULT_NAMESPACE

    def key_types(self, keys: tuple[str, ...] | None) -> dict[str, str]:
        value = self.raw.get("key_types")
        if value is None:
            return {}
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and t in KEY_TYPES for k, t in value.items()
        ):
            raise self.error("key_types", f"must map keys to one of {', '.join(KEY_TYPES)}")
        stray = sorted(set(value) - set(keys or ()))
        if stray:
            raise self.error("key_types", f"names {stray!r}, which are not among its keys")
        return dict(value)


def _memory(raw: Any, position: int) -> Memory:
    record = _Record(raw, f"memories[{position}]")
    memory_id = record.text("id")
    record.where = f"memory {memory_id!r}"
    keys = record.id_list("keys", optional=True)
    return Memory(
        id=memory_id,
        content=record.text("content"),
        title=record.optional_text("title"),
        keys=keys or None,
        namespace=record.namespace(),
        key_types=record.key_types(keys),
    )


def _query(raw: Any, position: int) -> Query:
    record = _Record(raw, f"queries[{position}]")
    query_id = record.text("id")
    record.where = f"query {query_id!r}"
    gold = record.id_list("gold")
    assert gold is not None
    all_required = record.raw.get("gold_all_required", True)
    if not isinstance(all_required, bool):
        raise record.error("gold_all_required", "must be true or false")
    kind = record.raw.get("type")
    if kind is not None and not isinstance(kind, str):
        raise record.error("type", "must be a string")
    return Query(
        id=query_id,
        query=record.text("query"),
        gold=gold,
        gold_all_required=all_required,
        type=kind or "untyped",
        memory_ids=record.id_list("memory_ids", optional=True),
        namespace=record.namespace(),
    )


def _unique(ids: Iterable[str], what: str) -> None:
    seen: set[str] = set()
    for item in ids:
        if item in seen:
            raise DatasetError(f"{what} id {item!r} appears twice")
        seen.add(item)


def _check_references(
    setting: Setting, memories: Sequence[Memory], queries: Sequence[Query]
) -> None:
    namespace_of = {m.id: m.namespace for m in memories}
    for query in queries:
        for memory_id in query.gold:
            if memory_id not in namespace_of:
                raise DatasetError(f"query {query.id!r}: gold memory {memory_id!r} does not exist")
        if setting == "per_query":
            if query.memory_ids is None:
                raise DatasetError(f"query {query.id!r}: a per_query file needs 'memory_ids'")
            for memory_id in query.memory_ids:
                if memory_id not in namespace_of:
                    raise DatasetError(
                        f"query {query.id!r}: memory_ids entry {memory_id!r} does not exist"
                    )
            missing = set(query.gold) - set(query.memory_ids)
            if missing:
                raise DatasetError(
                    f"query {query.id!r}: gold {sorted(missing)} not among its memory_ids"
                )
        else:
            for memory_id in query.gold:
                if namespace_of[memory_id] != query.namespace:
                    raise DatasetError(
                        f"query {query.id!r}: gold memory {memory_id!r} is in namespace "
                        f"{namespace_of[memory_id]!r}, the query searches {query.namespace!r}"
                    )


def parse_benchmark(raw: Any, source: str = "<benchmark>") -> Benchmark:
    """A validated ``Benchmark`` from decoded JSON; ``DatasetError`` names the first problem."""
    top = _Record(raw, source)
    setting = top.raw.get("setting")
    if setting not in SETTINGS:
        raise top.error("setting", f"must be one of {', '.join(SETTINGS)}, got {setting!r}")
    for part in ("memories", "queries"):
        if not isinstance(top.raw.get(part), list) or not top.raw[part]:
            raise top.error(part, "must be a non-empty list")
    memories = [_memory(m, i) for i, m in enumerate(top.raw["memories"])]
    queries = [_query(q, i) for i, q in enumerate(top.raw["queries"])]
    _unique((m.id for m in memories), "memory")
    _unique((q.id for q in queries), "query")
    _check_references(setting, memories, queries)
    name = top.raw.get("name")
    return Benchmark(
        name=name if isinstance(name, str) and name else source,
        setting=setting,
        memories=tuple(memories),
        queries=tuple(queries),
    )


def load_benchmark(path: Path) -> Benchmark:
    """Read and validate a benchmark file; ``DatasetError`` for anything unusable."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text: {exc}") from exc
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: not JSON: {exc}") from exc
    return parse_benchmark(raw, str(path))
