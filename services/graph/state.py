"""The graph in memory: records, adjacency, per-namespace key indexes, dedup and TTL indexes.

Rebuilt from the store at start and authoritative for reads afterwards. Every mutation goes
through a method here that also records the touched rows in the current ``Changes``, so the
service can write exactly what changed in one transaction.
"""

from __future__ import annotations

import heapq
import secrets
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from keymem.services.graph.dedup import DedupBuild, DedupTable, index_text
from keymem.services.graph.keyindex import UNHELD_VECTOR, KeyIndex
from keymem.services.graph.links import LEARNED, LinksByKey, LinksByMemory, LinkTable, Strongest
from keymem.services.graph.memory_vectors import PRODUCT_CODE, MemoryVectors, code_of
from keymem.services.graph.text import normalize_content
from keymem.store.changes import Changes
from keymem.store.database import LoadedGraph
from keymem.store.records import KeyAlias, KeyRecord, LinkRecord, MemoryRecord

ID_BYTES = 6  # 12 hex characters, as the original
LINK_WEIGHT_MIN = 0.1
LINK_WEIGHT_MAX = 3.0
LINK_WEIGHT_DEFAULT = 1.0
DEPTH_MIN = 0.0
DEPTH_MAX = 1.0


def clamp_weight(weight: float) -> float:
    return min(LINK_WEIGHT_MAX, max(LINK_WEIGHT_MIN, weight))


def clamp_depth(depth: float) -> float:
    return min(DEPTH_MAX, max(DEPTH_MIN, depth))


STRONGEST_CACHED = 256


@dataclass(slots=True)
class NamespaceTally:
    """A namespace's sizes, kept in step with every mutation so that counting them and
    paging one namespace never walk the other memories."""

    ids: set[str] = field(default_factory=set)  # every version
    current: int = 0  # versions not superseded (expired ones included until swept)
    links: int = 0


class GraphState:
    def __init__(self, loaded: LoadedGraph, hub_min_links: int) -> None:
        self.hub_min_links = hub_min_links  # a key with this many active memories is a hub
        self.keys: dict[str, KeyRecord] = loaded.keys
        self.memories: dict[str, MemoryRecord] = loaded.memories
        # The store deletes links with their key or memory in one transaction, so every
        # loaded link has both ends.
        self.links = LinkTable(
            loaded.links,
            loaded.key_columns.get("id", np.empty(0, dtype=object)).tolist(),
            np.ma.getdata(loaded.memory_columns.get("id", np.empty(0, dtype=object))).tolist(),
            self.keys,
            self.memories,
        )
        # key id -> its links by memory id; memory id -> its links by key id (read-only)
        self.key_links: LinksByKey = self.links.by_key
        self.mem_links: LinksByMemory = self.links.by_memory
        self.epoch = loaded.meta["epoch"]
        self.fingerprint: str | None = loaded.meta.get("fingerprint") or None
        self.dim: int | None = int(loaded.meta["dim"]) if loaded.meta.get("dim") else None
        # when the last sleep pass finished (services/graph/sleep.py); 0 = never
        self.slept_at = float(loaded.meta.get("slept_at") or 0.0)
        self.head_seq = loaded.head_seq
        self.first_seq = loaded.first_seq
        self.indexes: dict[str, KeyIndex] = {}
        # memory id -> its text vector's code, per namespace (the dense candidate leg), and
        # the active memories that have none yet, oldest first (``vector_backlog``)
        self.memory_vectors = MemoryVectors(PRODUCT_CODE)
        self.unvectorised: dict[str, None] = {}
        # key id -> active memories written with it (learned links left out: an association
        # hook learning made must not dilute the key's IDF for the memories it names)
        self.active_count: dict[str, int] = defaultdict(int)
        self.ttl_heap: list[tuple[float, str]] = []
        # memory id -> memories whose related_to names it (kept loosely: readers re-check)
        self.related_by: dict[str, set[str]] = defaultdict(set)
        self.tallies: dict[str, NamespaceTally] = defaultdict(NamespaceTally)
        self.changes = Changes()
        # key id -> its strongest links, weight-descending (hub expansion reads these often)
        self._strongest: dict[str, Strongest] = {}
        self._count_active(loaded)
        by_namespace: dict[str, list[KeyRecord]] = defaultdict(list)
        for key in self.keys.values():
            by_namespace[key.namespace].append(key)
        for namespace, keys in by_namespace.items():
            held = _loaded_rows(loaded.key_matrices.get(namespace), keys)
            index = KeyIndex.bulk(len(keys[0].vector), keys, held)
            self.indexes[namespace] = index
            self._share_vectors(index, index.ids)
        links_of = np.bincount(
            self.links.loaded_memory_rows, minlength=len(loaded.memory_columns.get("id", ()))
        ).tolist()
        for memory in self.memories.values():
            tally = self.tallies[memory.namespace]
            tally.links += links_of[memory.row]
            tally.ids.add(memory.id)
            tally.current += memory.superseded_by is None
            if memory.expires_at is not None:
                self.ttl_heap.append((memory.expires_at, memory.id))
            for related_id in memory.related_to:
                self.related_by[related_id].add(memory.id)
        heapq.heapify(self.ttl_heap)
        self._load_memory_vectors(loaded)
        # namespace -> hash of the normalised content -> the active memory holding that text
        # (``duplicate_of`` compares the texts: a hash is 32 bytes where the normalised copy of
        # a text took ~150), built on a thread while the graph serves (services/graph/dedup.py)
        self._dedup = DedupBuild([m for m in self.memories.values() if m.superseded_by is None])

    def _load_memory_vectors(self, loaded: LoadedGraph) -> None:
        """The stored codes, one buffer per namespace, and the backlog of active memories
        without one (a quarantined memory is left out of both)."""
        ids = np.ma.getdata(loaded.memory_columns.get("id", np.empty(0, dtype=object)))
        whole = len(self.memories) == len(ids)
        for group in loaded.memory_codes:
            if self.dim is None:
                break
            members, codes = ids[group.positions].tolist(), group.codes
            if not whole:
                kept = np.array([m in self.memories for m in members], dtype=bool)
                members, codes = np.asarray(members, dtype=object)[kept].tolist(), codes[kept]
            if members:
                namespace = self.memories[members[0]].namespace
                self.memory_vectors.load(namespace, self.dim, members, codes)
        self.unvectorised = dict.fromkeys(
            m for m in ids[loaded.unvectorised].tolist() if whole or m in self.memories
        )

    def _count_active(self, loaded: LoadedGraph) -> None:
        """``active_count`` from the loaded links: per key, those not learned whose memory is
        not superseded."""
        rows = len(loaded.memory_columns.get("id", ()))
        superseded = np.zeros(rows, dtype=bool)
        superseded[[m.row for m in self.memories.values() if m.superseded_by is not None]] = True
        memory_rows = self.links.loaded_memory_rows
        counted = ~superseded[memory_rows] & ((self.links.loaded_flags & LEARNED) == 0)
        key_ids = loaded.key_columns.get("id", np.empty(0, dtype=object))
        counts = np.bincount(self.links.loaded_key_rows[counted], minlength=len(key_ids))
        held = np.flatnonzero(counts)
        self.active_count.update(zip(key_ids[held].tolist(), counts[held].tolist(), strict=True))

    # -- ids and lookups -------------------------------------------------------------------
    def new_id(self) -> str:
        while True:
            candidate = secrets.token_hex(ID_BYTES)
            if candidate not in self.memories and candidate not in self.keys:
                return candidate

    def index_for(self, namespace: str, dim: int | None = None) -> KeyIndex:
        index = self.indexes.get(namespace)
        if index is None:
            index = KeyIndex(dim or self.dim or 0)
            self.indexes[namespace] = index
        return index

    def link(self, key_id: str, memory_id: str) -> LinkRecord | None:
        return self.links.get(key_id, memory_id)

    def strongest_columns(self, key_id: str, count: int) -> Strongest:
        """A key's ``count`` strongest links as columns (``links.Strongest``), strongest first,
        ties in ``key_links`` order; cached up to STRONGEST_CACHED per key."""
        if count > STRONGEST_CACHED:
            return self.links.strongest(key_id, count)
        cached = self._strongest.get(key_id)
        if cached is None:
            cached = self.links.strongest(key_id, STRONGEST_CACHED)
            self._strongest[key_id] = cached
        return cached if count >= len(cached.handles) else cached[:count]

    def strongest(self, key_id: str, count: int) -> list[LinkRecord]:
        """A key's ``count`` strongest links, strongest first, ties in ``key_links`` order."""
        return self.links.at(self.strongest_columns(key_id, count).handles)

    def ranked(self, key_id: str) -> list[LinkRecord]:
        """Every link of a key, strongest first (ties in ``key_links`` order)."""
        return self.links.at(self.links.ranking(key_id))

    # -- sizes -----------------------------------------------------------------------------
    def expired_current(self, now: float) -> Counter[str]:
        """Per namespace, the unsuperseded memories past their expiry that the sweep has not
        deleted yet. Only the heap's entries due by ``now`` are visited (a subtree whose root
        is later holds nothing due), and the sweep keeps those few."""
        heap, found, seen = self.ttl_heap, Counter[str](), set[str]()
        stack = [0] if heap else []
        while stack:
            position = stack.pop()
            if position >= len(heap) or heap[position][0] > now:
                continue
            expires_at, memory_id = heap[position]
            memory = self.memories.get(memory_id)
            if (
                memory is not None
                and memory.expires_at == expires_at
                and memory.superseded_by is None
                and memory_id not in seen
            ):
                seen.add(memory_id)
                found[memory.namespace] += 1
            stack += (2 * position + 1, 2 * position + 2)
        return found

    def namespace_ids(self, namespace: str) -> set[str]:
        """Every version's id in ``namespace`` (the set itself: do not change it)."""
        tally = self.tallies.get(namespace)
        return tally.ids if tally is not None else set()

    def active_in(self, namespace: str, now: float) -> int:
        tally = self.tallies.get(namespace)
        current = tally.current if tally is not None else 0
        return current - self.expired_current(now)[namespace]

    # -- memories --------------------------------------------------------------------------
    def add_memory(self, memory: MemoryRecord) -> None:
        self.memories[memory.id] = memory
        tally = self.tallies[memory.namespace]
        tally.ids.add(memory.id)
        tally.current += memory.superseded_by is None
        self.index_content(memory)
        if memory.expires_at is not None:
            heapq.heappush(self.ttl_heap, (memory.expires_at, memory.id))
        for related_id in memory.related_to:
            self.related_by[related_id].add(memory.id)
        if memory.superseded_by is None:
            self.unvectorised[memory.id] = None
        self.changes.add_memory(memory)
        self.changes.upsert_event(memory)

    @property
    def dedup(self) -> DedupTable:
        """The dedup table; the first write after start waits here for its build."""
        return self._dedup.table()

    def index_content(self, memory: MemoryRecord) -> None:
        """Make ``memory`` the dedup target for its text (unless another active one is)."""
        index_text(self.dedup, memory)

    def duplicate_of(self, namespace: str, content: str) -> MemoryRecord | None:
        """The memory that holds ``content``'s text in ``namespace`` as the dedup target (two
        texts whose hashes collide, ~1 in 2**64 a pair: the later is not deduplicated)."""
        norm = normalize_content(content)
        memory = self.memories.get(self.dedup.get(namespace, {}).get(hash(norm), ""))
        if memory is None or normalize_content(memory.content) != norm:
            return None
        return memory

    def _unindex_content(self, memory: MemoryRecord) -> None:
        table = self.dedup.get(memory.namespace, {})
        norm = hash(normalize_content(memory.content))
        if table.get(norm) == memory.id:
            del table[norm]

    def touch_memory(self, memory: MemoryRecord) -> None:
        self.changes.touch_memory(memory)

    def deactivate(self, memory: MemoryRecord) -> None:
        """Take a memory out of active retrieval (superseded); its rows stay."""
        self._unindex_content(memory)
        for link in self.mem_links[memory.id].values():
            if not link.learned:
                self.active_count[link.key_id] -= 1
        self.tallies[memory.namespace].current -= 1
        self._drop_vector(memory)
        self.changes.delete_event(memory)

    def delete_memory(self, memory: MemoryRecord, now: float) -> list[str]:
        """Hard delete with its links; keys left without links go too. Returns deleted key ids."""
        was_active = memory.superseded_by is None
        if was_active:
            self._unindex_content(memory)
            self.changes.delete_event(memory)
        tally = self.tallies[memory.namespace]
        tally.ids.discard(memory.id)
        tally.current -= was_active
        links = self.links.remove_memory(memory.id)
        tally.links -= len(links)
        if not tally.ids:
            del self.tallies[memory.namespace]
        orphaned: list[str] = []
        for link in links:
            key_id = link.key_id
            self._strongest.pop(key_id, None)
            if was_active and not link.learned:
                self.active_count[key_id] -= 1
            if not self.links.count_of_key(key_id):
                orphaned.append(key_id)
        del self.memories[memory.id]
        if was_active:
            self._drop_vector(memory)
        self.changes.delete_memory(memory.id)
        for key_id in orphaned:
            self.delete_key(self.keys[key_id])
        return orphaned

    # -- memory vectors (the dense leg) -----------------------------------------------------
    def _drop_vector(self, memory: MemoryRecord) -> None:
        """An active memory leaving retrieval is never proposed again: its code leaves the
        scan (its row in the file goes with the memory, or stays with a superseded version,
        never loaded). An active memory has a code or waits in the backlog, never both."""
        if memory.id in self.unvectorised:
            del self.unvectorised[memory.id]
        elif self.dim is not None:
            self.memory_vectors.remove(memory.namespace, memory.id)

    def put_memory_vector(self, memory_id: str, vector: np.ndarray, fingerprint: str) -> bool:
        """Store an active memory's vector from the recorded embedder; False (nothing changes)
        when the memory has one already or is gone or inactive since it was asked for."""
        if memory_id not in self.unvectorised or self.dim is None:
            return False
        memory = self.memories.get(memory_id)
        if memory is None or memory.superseded_by is not None:
            self.unvectorised.pop(memory_id)
            return False
        code = code_of(vector)
        self.memory_vectors.put_code(memory.namespace, memory_id, code, self.dim)
        del self.unvectorised[memory_id]
        self.changes.put_code(memory_id, code, fingerprint)
        return True

    def reset_memory_vectors(self) -> None:
        """Another embedder's vectors (a re-embedding): every active memory is vectorised
        again by the background pass."""
        self.memory_vectors.clear()
        self.unvectorised = dict.fromkeys(
            m.id
            for m in sorted(self.memories.values(), key=lambda m: (m.created_at, m.id))
            if m.superseded_by is None
        )

    # -- keys ------------------------------------------------------------------------------
    def add_key(self, key: KeyRecord) -> None:
        self.keys[key.id] = key
        self._index_add(key)
        self.changes.add_key(key)

    def delete_key(self, key: KeyRecord) -> None:
        self._index_remove(key)
        del self.keys[key.id]
        self.active_count.pop(key.id, None)
        self.changes.delete_key(key.id)

    def unlink_key(self, key_id: str) -> list[LinkRecord]:
        """Take every link of a key out of the graph and return them, before the key is
        deleted (deleting a key deletes its link rows): a key merge moves them elsewhere."""
        links = self.links.remove_key(key_id)
        self._strongest.pop(key_id, None)
        memories = self.memories
        for link in links:
            memory = memories[link.memory_id]
            self.tallies[memory.namespace].links -= 1
            if memory.superseded_by is None and not link.learned:
                self.active_count[key_id] -= 1
        return links

    def add_alias(self, key: KeyRecord, alias: KeyAlias) -> bool:
        """Record an alias unless the key already answers to it; True when added."""
        clean = alias.alias.strip()
        if len(clean) < 2:
            return False
        lowered = clean.lower()
        if any(s.strip().lower() == lowered for s in key.surfaces()):
            return False
        alias.alias = clean
        key.aliases.append(alias)
        self.indexes[key.namespace].add_surface(key.id, clean)
        self.changes.rewrite_aliases(key)
        self.docs_changed_for_key(key.id)
        return True

    def remove_alias(self, key: KeyRecord, alias: KeyAlias) -> None:
        self._index_remove(key)
        key.aliases.remove(alias)
        self._index_add(key)
        self.changes.rewrite_aliases(key)
        self.docs_changed_for_key(key.id)

    # A key's record reads its vector from its namespace's matrix (one copy of each vector):
    # every change that moves rows of a matrix points the records of the moved rows again.
    # Once a namespace's matrix is halved (its approximate index serves) the records hold
    # UNHELD_VECTOR and ``key_vector`` reads the matrix; a key written since keeps its own
    # vector (the store is written from it).
    def _share_vectors(self, index: KeyIndex, key_ids: Iterable[str]) -> None:
        matrix, pos, keys = index.matrix, index.pos, self.keys
        if index.halved:
            return
        for key_id in key_ids:
            keys[key_id].vector = matrix[pos[key_id]]

    def key_vector(self, key: KeyRecord) -> np.ndarray:
        """A key's float32 vector (every reader of a stored key's vector goes through here)."""
        if key.vector.size:
            return key.vector
        return self.indexes[key.namespace].vector(key.id)

    def halve_matrices(self) -> int:
        """Halve the matrix of every namespace whose approximate index now serves
        (``KeyIndex.halve``) and point its key records away from the float32 rows; how many
        were."""
        halved = 0
        for index in self.indexes.values():
            if index.halve():
                halved += 1
                keys = self.keys
                for key_id in index.ids:
                    keys[key_id].vector = UNHELD_VECTOR
        return halved

    def _index_add(self, key: KeyRecord) -> None:
        index = self.index_for(key.namespace, len(key.vector))
        matrix = index.matrix
        index.add(key)
        self._share_vectors(index, index.ids if index.matrix is not matrix else (key.id,))

    def _index_remove(self, key: KeyRecord) -> None:
        index = self.indexes[key.namespace]
        # its row is about to hold another key's vector (or its index to forget it)
        key.vector = self.key_vector(key).copy()
        last = index.ids[-1]
        index.remove(key)
        if last != key.id:
            self._share_vectors(index, (last,))

    def set_key_type(self, key: KeyRecord, key_type: str) -> None:
        key.key_type = key_type
        self.indexes[key.namespace].set_entity(key)
        self.changes.touch_key(key)

    def docs_changed_for_key(self, key_id: str) -> None:
        """A key's surfaces changed: every active memory it reaches gets an upsert event."""
        for memory_id in self.key_links[key_id]:
            memory = self.memories[memory_id]
            if memory.superseded_by is None and memory.id not in self.changes.new_memories:
                self.changes.upsert_event(memory)

    # -- links -----------------------------------------------------------------------------
    def add_link(
        self,
        key_id: str,
        memory_id: str,
        weight: float,
        *,
        auto: bool = False,
        learned: bool = False,
    ) -> None:
        if self.link(key_id, memory_id) is not None:
            return
        record = LinkRecord(key_id, memory_id, clamp_weight(weight), auto, learned)
        self._strongest.pop(key_id, None)
        self.links.add(record)
        memory = self.memories[memory_id]
        self.tallies[memory.namespace].links += 1
        if memory.superseded_by is None and not learned:
            self.active_count[key_id] += 1
        self.changes.add_link(record)

    def set_weight(self, link: LinkRecord, weight: float) -> None:
        self.links.set_weight(link, clamp_weight(weight))
        self._strongest.pop(link.key_id, None)
        self.changes.touch_link(link)


def _loaded_rows(held: np.ndarray | None, keys: list[KeyRecord]) -> np.ndarray | None:
    """``held`` when ``keys`` are its first rows, in order: the load's matrix, unless the
    quarantine took a key out (it only takes out, so the last key in the last row means none
    before it was)."""
    if held is None or len(keys) > len(held):
        return None
    last = keys[-1].vector
    in_place = last.base is held and last.ctypes.data == held[len(keys) - 1].ctypes.data
    return held if in_place else None
