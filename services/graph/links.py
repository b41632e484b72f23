"""Every link of the graph: the loaded ones in numpy columns, the ones written since in dicts.

At 1M memories the graph holds 4.5M links; as one ``LinkRecord`` and two dict slots each they
took ~1.1 GB and a third of the start-up. Here a loaded link is a row of five columns (key
row, memory row, weight, flags): a memory's links are one span of them (they load sorted by
memory), a key's links one span of a permutation sorted by key. A link written after the load
is a ``LinkRecord`` in a small overlay of dicts; a loaded link that is deleted is flagged gone.

Readers see both through ``by_memory[memory_id]`` (key id -> link) and ``by_key[key_id]``
(memory id -> link), read-only mappings in the order the dicts they replace had (a key's
loaded links by memory id, then those written since, in order). The ``LinkRecord`` of a
loaded link is made when it is read: change a weight with ``set_weight``, which writes the
column, never by assigning to a record alone.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import ItemsView, Iterator, Mapping, Sequence, ValuesView
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from keymem.store.records import LinkColumns, LinkRecord

AUTO = 1
LEARNED = 2
GONE = 4
# From this many links on, records are made from whole columns (numpy's per-call cost then
# pays off); fewer are read one element at a time.
BULK_MIN_LINKS = 16


class Rowed(Protocol):
    """A key or memory record: ``row`` is its position among the loaded rows (-1: new)."""

    row: int


def _firsts(groups: np.ndarray) -> np.ndarray:
    """Where each run of equal values in ``groups`` starts."""
    if not len(groups):
        return np.zeros(0, dtype=np.int64)
    cuts = np.flatnonzero(groups[1:] != groups[:-1]) + 1
    return np.concatenate([np.zeros(1, dtype=np.int64), cuts])


def _spans(groups: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group number < ``size``: the start and length of its one run in ``groups``."""
    counts = np.bincount(groups, minlength=size).astype(np.int32)
    starts = np.zeros(size, dtype=np.int64)
    firsts = _firsts(groups)
    if len(firsts) != np.count_nonzero(counts):
        raise ValueError("links must arrive grouped by memory")
    starts[groups[firsts]] = firsts
    return starts, counts


def flags_of(link: LinkRecord) -> int:
    """A record's ``AUTO`` / ``LEARNED`` bits, as the flag column holds them."""
    return AUTO * link.auto | LEARNED * link.learned


@dataclass(slots=True)
class Strongest:
    """A key's strongest links, strongest first, as columns: the handles ``LinkTable.at``
    reads (the column indices as an array when every link is a loaded one: a cache holds one
    per key walked), and for a hop walk's arrays each link's memory id, memory number
    (``LinkTable.memory_number``), weight and flags. The weights and flags are the ones of the
    moment it was made: whoever caches one drops it when a link of the key changes."""

    handles: np.ndarray | list[int | LinkRecord]
    memory_ids: list[str]
    numbers: np.ndarray  # int64
    weights: np.ndarray  # float64
    flags: np.ndarray  # uint8

    def __getitem__(self, cut: slice) -> Strongest:
        return Strongest(
            self.handles[cut],
            self.memory_ids[cut],
            self.numbers[cut],
            self.weights[cut],
            self.flags[cut],
        )


class LinkTable:
    """The links, with ``by_memory`` and ``by_key`` as the ways in (module docstring)."""

    def __init__(
        self,
        columns: LinkColumns,
        key_ids: list[str],
        memory_ids: list[str],
        keys: Mapping[str, Rowed],
        memories: Mapping[str, Rowed],
    ) -> None:
        # ``columns`` sorted by memory; key_ids / memory_ids: the id at each loaded row.
        self._keys, self._memories = keys, memories
        self._key_ids, self._memory_ids = key_ids, memory_ids
        self._key = columns.key_row.astype(np.int32)
        self._memory = columns.memory_row.astype(np.int32)
        self._weight = np.array(columns.weight, dtype=np.float64)
        self._flags = (
            columns.auto.astype(np.uint8) * AUTO | columns.learned.astype(np.uint8) * LEARNED
        )
        self._gone = 0  # loaded links deleted so far (none: no span needs filtering)
        self._memory_start, self._memory_count = _spans(self._memory, len(memory_ids))
        self._by_key_order = np.argsort(self._key, kind="stable").astype(np.int32)
        self._key_start, self._key_count = _spans(self._key[self._by_key_order], len(key_ids))
        self._memory_live = self._memory_count.copy()
        self._key_live = self._key_count.copy()
        # The same buffers for one element at a time: a memoryview hands out Python numbers
        # several times faster than indexing the array (a memory's few links, one lookup).
        self._at_key = self._key.data
        self._at_memory = self._memory.data
        self._at_weight = self._weight.data
        self._at_flags = self._flags.data
        self._at_memory_start = self._memory_start.data
        self._at_memory_count = self._memory_count.data
        self._at_memory_live = self._memory_live.data
        # links written since the load, both ways
        self._new_by_memory: dict[str, dict[str, LinkRecord]] = {}
        self._new_by_key: dict[str, dict[str, LinkRecord]] = {}
        # memory id -> its number, for memories written since the load (``memory_number``)
        self._new_numbers: dict[str, int] = {}
        self._next_number = len(memory_ids)
        self.by_memory = LinksByMemory(self)
        self.by_key = LinksByKey(self)

    # -- columns ---------------------------------------------------------------------------
    @property
    def loaded_key_rows(self) -> np.ndarray:
        """The key row of every loaded link (deleted ones included), for bulk counts."""
        return self._key

    @property
    def loaded_memory_rows(self) -> np.ndarray:
        return self._memory

    @property
    def loaded_flags(self) -> np.ndarray:
        return self._flags

    def _row(self, records: Mapping[str, Rowed], record_id: str) -> int:
        record = records.get(record_id)
        return -1 if record is None else record.row

    def memory_indices(self, memory_id: str) -> list[int]:
        """The loaded live links of a memory (indices into the columns)."""
        row = self._row(self._memories, memory_id)
        if row < 0:
            return []
        start = self._at_memory_start[row]
        span = range(start, start + self._at_memory_count[row])
        if not self._gone:
            return list(span)
        flags = self._at_flags
        return [i for i in span if not flags[i] & GONE]

    def key_rows(self, key_id: str) -> np.ndarray:
        """The loaded live links of a key, in memory id order."""
        row = self._row(self._keys, key_id)
        if row < 0 or not self._key_live[row]:
            return np.empty(0, dtype=np.int64)
        start = int(self._key_start[row])
        indices = self._by_key_order[start : start + int(self._key_count[row])]
        if not self._gone:
            return indices
        live: np.ndarray = indices[(self._flags[indices] & GONE) == 0]
        return live

    def key_ids_at(self, indices: Sequence[int] | np.ndarray) -> list[str]:
        if isinstance(indices, np.ndarray):
            indices = indices.tolist()
        ids, at = self._key_ids, self._at_key
        return [ids[at[i]] for i in indices]

    def memory_ids_at(self, indices: np.ndarray) -> list[str]:
        ids = self._memory_ids
        return [ids[row] for row in self._memory[indices].tolist()]

    def memory_number(self, memory_id: str) -> int:
        """A memory's number, for walks that group paths by memory in arrays: its loaded row,
        or for a memory written since the load one past the loaded rows, given at first ask
        (ids are never reused, so a number never names two memories)."""
        row = self._row(self._memories, memory_id)
        if row >= 0:
            return row
        number = self._new_numbers.get(memory_id)
        if number is None:
            number = self._new_numbers[memory_id] = self._next_number
            self._next_number += 1
        return number

    def key_flags(self, memory_id: str) -> list[tuple[str, int]]:
        """A memory's links as (key id, flags) in ``by_memory``'s order, without a record per
        link: what a candidate's ``about`` and subject read."""
        ids, at_key, at_flags = self._key_ids, self._at_key, self._at_flags
        loaded = [(ids[at_key[i]], at_flags[i]) for i in self.memory_indices(memory_id)]
        new = self._new_by_memory.get(memory_id)
        if new:
            loaded += [(key_id, flags_of(link)) for key_id, link in new.items()]
        return loaded

    def new_of_memory(self, memory_id: str) -> dict[str, LinkRecord]:
        """A memory's links written since the load, by key id (do not change it)."""
        return self._new_by_memory.get(memory_id, {})

    def new_of_key(self, key_id: str) -> dict[str, LinkRecord]:
        """A key's links written since the load, by memory id (do not change it)."""
        return self._new_by_key.get(key_id, {})

    def records(self, indices: Sequence[int] | np.ndarray) -> list[LinkRecord]:
        """The loaded links at ``indices`` as records (a weight set on one is not kept)."""
        if len(indices) < BULK_MIN_LINKS:
            return [self._record(i) for i in indices]
        at = np.asarray(indices, dtype=np.int64)
        flags = self._flags[at]
        key_ids, memory_ids = self._key_ids, self._memory_ids
        return list(
            map(
                LinkRecord,
                [key_ids[row] for row in self._key[at].tolist()],
                [memory_ids[row] for row in self._memory[at].tolist()],
                self._weight[at].tolist(),
                ((flags & AUTO) != 0).tolist(),
                ((flags & LEARNED) != 0).tolist(),
            )
        )

    def _record(self, index: int) -> LinkRecord:
        flags = self._at_flags[index]
        return LinkRecord(
            self._key_ids[self._at_key[index]],
            self._memory_ids[self._at_memory[index]],
            self._at_weight[index],
            bool(flags & AUTO),
            bool(flags & LEARNED),
        )

    def _find(self, key_id: str, memory_id: str) -> int:
        """The column index of a live loaded link, or -1."""
        key, memory = self._keys.get(key_id), self._memories.get(memory_id)
        if key is None or memory is None or key.row < 0 or memory.row < 0:
            return -1
        start = self._at_memory_start[memory.row]
        at_key, at_flags, key_row = self._at_key, self._at_flags, key.row
        for index in range(start, start + self._at_memory_count[memory.row]):
            if at_key[index] == key_row and not at_flags[index] & GONE:
                return index
        return -1

    # -- reads -----------------------------------------------------------------------------
    def get(self, key_id: str, memory_id: str) -> LinkRecord | None:
        new = self._new_by_key.get(key_id)
        if new is not None and memory_id in new:
            return new[memory_id]
        index = self._find(key_id, memory_id)
        return None if index < 0 else self._record(index)

    def count_of_memory(self, memory_id: str) -> int:
        row = self._row(self._memories, memory_id)
        loaded = self._at_memory_live[row] if row >= 0 else 0
        return loaded + len(self._new_by_memory.get(memory_id, ()))

    def count_of_key(self, key_id: str) -> int:
        row = self._row(self._keys, key_id)
        loaded = int(self._key_live[row]) if row >= 0 else 0
        return loaded + len(self._new_by_key.get(key_id, ()))

    def ranking(self, key_id: str, count: int | None = None) -> list[int | LinkRecord]:
        """A key's links by weight, strongest first (ties in the mapping's order), as handles
        for ``at``: a loaded link's column index, a newer link's record."""
        indices = self.key_rows(key_id)
        new = list(self._new_by_key.get(key_id, {}).values())
        weights = self._weight[indices]
        if new:
            weights = np.concatenate([weights, [link.weight for link in new]])
        order = np.argsort(-weights, kind="stable")[:count].tolist()
        loaded = len(indices)
        at = indices.tolist()
        return [at[i] if i < loaded else new[i - loaded] for i in order]

    def at(self, handles: np.ndarray | Sequence[int | LinkRecord]) -> list[LinkRecord]:
        """The links ``ranking`` handed out (or their column indices), as records with their
        current weights."""
        if isinstance(handles, np.ndarray):
            return self.records(handles)
        return [h if isinstance(h, LinkRecord) else self._record(h) for h in handles]

    def strongest(self, key_id: str, count: int) -> Strongest:
        """``ranking``'s ``count`` strongest links with their columns (``Strongest``)."""
        handles = self.ranking(key_id, count)
        if all(isinstance(h, int) for h in handles):
            at = np.array(handles, dtype=np.int64)
            return Strongest(
                at,
                self.memory_ids_at(at),
                self._memory[at].astype(np.int64),
                self._weight[at],
                self._flags[at],
            )
        links = self.at(handles)
        return Strongest(
            handles,
            [link.memory_id for link in links],
            np.array([self.memory_number(link.memory_id) for link in links], dtype=np.int64),
            np.array([link.weight for link in links], dtype=np.float64),
            np.array([flags_of(link) for link in links], dtype=np.uint8),
        )

    def kinds(self) -> tuple[int, int, int]:
        """How many links there are: all, extracted auto-keys' (auto, not learned), learned."""
        flags = self._flags[(self._flags & GONE) == 0]
        new = [link for links in self._new_by_memory.values() for link in links.values()]
        auto = int(np.count_nonzero(flags == AUTO))
        learned = int(np.count_nonzero(flags & LEARNED))
        auto += sum(1 for link in new if link.auto and not link.learned)
        learned += sum(1 for link in new if link.learned)
        return len(flags) + len(new), auto, learned

    # -- changes ---------------------------------------------------------------------------
    def add(self, link: LinkRecord) -> None:
        self._new_by_key.setdefault(link.key_id, {})[link.memory_id] = link
        self._new_by_memory.setdefault(link.memory_id, {})[link.key_id] = link

    def set_weight(self, link: LinkRecord, weight: float) -> None:
        """Give ``link`` its new weight, in the graph too when it is (still) there."""
        link.weight = weight
        new = self._new_by_key.get(link.key_id, {}).get(link.memory_id)
        if new is not None:
            new.weight = weight
            return
        index = self._find(link.key_id, link.memory_id)
        if index >= 0:
            self._weight[index] = weight

    def _drop_loaded(self, at: Sequence[int] | np.ndarray) -> None:
        indices = np.asarray(at, dtype=np.int64)
        self._flags[indices] |= GONE
        self._gone += len(indices)
        np.subtract.at(self._key_live, self._key[indices], 1)
        np.subtract.at(self._memory_live, self._memory[indices], 1)

    @staticmethod
    def _drop_new(outer: dict[str, dict[str, LinkRecord]], inner_id: str, other_id: str) -> None:
        links = outer.get(other_id)
        if links is not None:
            links.pop(inner_id, None)
            if not links:
                del outer[other_id]

    def remove_memory(self, memory_id: str) -> list[LinkRecord]:
        """Take every link of a memory out; returns them."""
        indices = self.memory_indices(memory_id)
        out = self.records(indices)
        self._drop_loaded(indices)
        self._new_numbers.pop(memory_id, None)
        for link in self._new_by_memory.pop(memory_id, {}).values():
            self._drop_new(self._new_by_key, memory_id, link.key_id)
            out.append(link)
        return out

    def remove_key(self, key_id: str) -> list[LinkRecord]:
        """Take every link of a key out; returns them."""
        indices = self.key_rows(key_id)
        out = self.records(indices)
        self._drop_loaded(indices)
        for link in self._new_by_key.pop(key_id, {}).values():
            self._drop_new(self._new_by_memory, key_id, link.memory_id)
            out.append(link)
        return out

    # -- the ways in -----------------------------------------------------------------------
    def memories_linked(self) -> Iterator[str]:
        """Every memory with a link: loaded ones in memory id order, then the rest."""
        seen = set()
        rows = self._memory[_firsts(self._memory)]
        for row in rows[self._memory_live[rows] > 0].tolist():
            seen.add(row)
            yield self._memory_ids[row]
        for memory_id in list(self._new_by_memory):
            if self._row(self._memories, memory_id) not in seen:
                yield memory_id

    def keys_linked(self) -> Iterator[str]:
        """Every key with a link: loaded ones by their first link, then the rest."""
        seen = set()
        rows, first = np.unique(self._key, return_index=True)
        for row in rows[np.argsort(first)].tolist():
            if self._key_live[row]:
                seen.add(row)
                yield self._key_ids[row]
        for key_id in list(self._new_by_key):
            if self._row(self._keys, key_id) not in seen:
                yield key_id


class LinksOf(Mapping[str, LinkRecord]):
    """One memory's links by key id, or one key's by memory id (read-only)."""

    __slots__ = ("_id", "_table")

    def __init__(self, table: LinkTable, owner_id: str) -> None:
        self._table, self._id = table, owner_id

    @abstractmethod
    def _loaded(self) -> Sequence[int] | np.ndarray:
        """The owner's live loaded links (column indices), in order."""

    @abstractmethod
    def _new(self) -> dict[str, LinkRecord]:
        """The owner's links written since the load, by the other end's id."""

    @abstractmethod
    def _link(self, other_id: str) -> LinkRecord | None: ...

    @abstractmethod
    def _loaded_others(self, indices: Sequence[int] | np.ndarray) -> list[str]:
        """The other end's id of each loaded link at ``indices``."""

    @staticmethod
    @abstractmethod
    def other(link: LinkRecord) -> str:
        """The id ``link`` is found under here."""

    def links(self) -> list[LinkRecord]:
        """Every link, in the mapping's order."""
        return [*self._table.records(self._loaded()), *self._new().values()]

    def __getitem__(self, other_id: str) -> LinkRecord:
        link = self._link(other_id)
        if link is None:
            raise KeyError(other_id)
        return link

    def __contains__(self, other_id: object) -> bool:
        return isinstance(other_id, str) and self._link(other_id) is not None

    def __iter__(self) -> Iterator[str]:
        return iter([*self._loaded_others(self._loaded()), *self._new()])

    def values(self) -> ValuesView[LinkRecord]:
        return _Values(self)

    def items(self) -> ItemsView[str, LinkRecord]:
        return _Items(self)


class _Values(ValuesView[LinkRecord]):
    _mapping: LinksOf

    def __iter__(self) -> Iterator[LinkRecord]:
        return iter(self._mapping.links())


class _Items(ItemsView[str, LinkRecord]):
    _mapping: LinksOf

    def __iter__(self) -> Iterator[tuple[str, LinkRecord]]:
        other = self._mapping.other
        return iter([(other(link), link) for link in self._mapping.links()])


class MemoryLinks(LinksOf):
    """A memory's links by key id."""

    __slots__ = ()

    def _loaded(self) -> list[int]:
        return self._table.memory_indices(self._id)

    def _new(self) -> dict[str, LinkRecord]:
        return self._table.new_of_memory(self._id)

    def _loaded_others(self, indices: Sequence[int] | np.ndarray) -> list[str]:
        return self._table.key_ids_at(indices)

    def _link(self, other_id: str) -> LinkRecord | None:
        return self._table.get(other_id, self._id)

    @staticmethod
    def other(link: LinkRecord) -> str:
        return link.key_id

    def __len__(self) -> int:
        return self._table.count_of_memory(self._id)


class KeyLinks(LinksOf):
    """A key's links by memory id."""

    __slots__ = ()

    def _loaded(self) -> np.ndarray:
        return self._table.key_rows(self._id)

    def _new(self) -> dict[str, LinkRecord]:
        return self._table.new_of_key(self._id)

    def _loaded_others(self, indices: Sequence[int] | np.ndarray) -> list[str]:
        return self._table.memory_ids_at(np.asarray(indices))

    def _link(self, other_id: str) -> LinkRecord | None:
        return self._table.get(self._id, other_id)

    @staticmethod
    def other(link: LinkRecord) -> str:
        return link.memory_id

    def __len__(self) -> int:
        return self._table.count_of_key(self._id)


class LinksByMemory(Mapping[str, MemoryLinks]):
    """memory id -> its links; a memory without links reads as an empty mapping."""

    def __init__(self, table: LinkTable) -> None:
        self._table = table

    def __getitem__(self, memory_id: str) -> MemoryLinks:
        return MemoryLinks(self._table, memory_id)

    def __contains__(self, memory_id: object) -> bool:
        return isinstance(memory_id, str) and self._table.count_of_memory(memory_id) > 0

    def __iter__(self) -> Iterator[str]:
        return self._table.memories_linked()

    def __len__(self) -> int:
        return sum(1 for _ in self)


class LinksByKey(Mapping[str, KeyLinks]):
    """key id -> its links; a key without links reads as an empty mapping."""

    def __init__(self, table: LinkTable) -> None:
        self._table = table

    def __getitem__(self, key_id: str) -> KeyLinks:
        return KeyLinks(self._table, key_id)

    def __contains__(self, key_id: object) -> bool:
        return isinstance(key_id, str) and self._table.count_of_key(key_id) > 0

    def __iter__(self) -> Iterator[str]:
        return self._table.keys_linked()

    def __len__(self) -> int:
        return sum(1 for _ in self)
