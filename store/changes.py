"""A unit of work: what one acknowledged write changed.

The service mutates its in-memory records directly and marks here what it touched. The write
is answered once its ``Changes`` is appended to the graph's write-behind log and fdatasync'ed
(store/writelog.py, encoded by store/logformat.py), so an acknowledged write is always on disk
(invariant 1); the store later folds the logged units into DuckDB in one transaction, writing
exactly those rows (new rows inserted, touched rows updated, deleted rows removed) and the
change-feed events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from keymem.store.records import KeyRecord, LinkRecord, MemoryRecord, Outcome

OP_UPSERT = "upsert"
OP_DELETE = "delete"


@dataclass
class Changes:
    new_memories: dict[str, MemoryRecord] = field(default_factory=dict)
    touched_memories: dict[str, MemoryRecord] = field(default_factory=dict)
    deleted_memories: set[str] = field(default_factory=set)
    new_keys: dict[str, KeyRecord] = field(default_factory=dict)
    touched_keys: dict[str, KeyRecord] = field(default_factory=dict)
    deleted_keys: set[str] = field(default_factory=set)
    # keys whose alias list / alias candidates must be rewritten
    alias_keys: dict[str, KeyRecord] = field(default_factory=dict)
    candidate_keys: dict[str, KeyRecord] = field(default_factory=dict)
    new_links: dict[tuple[str, str], LinkRecord] = field(default_factory=dict)
    touched_links: dict[tuple[str, str], LinkRecord] = field(default_factory=dict)
    related_rewrite: dict[str, MemoryRecord] = field(default_factory=dict)
    flags_rewrite: dict[str, MemoryRecord] = field(default_factory=dict)
    confirmations: list[tuple[str, float, str, str | None, str | None]] = field(
        default_factory=list
    )
    # (op, memory_id, namespace) in order; the store numbers them at commit
    events: list[tuple[str, str, str]] = field(default_factory=list)
    meta: dict[str, str] = field(default_factory=dict)
    # results of keyed writes, by idempotency key (services/graph/idempotency.py)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    # memory id -> (its vector's packed code, the embedder fingerprint it came from)
    memory_codes: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    # bumped by every method below: tells whether a failed request touched anything
    mutations: int = 0

    # -- memories --------------------------------------------------------------------------
    def add_memory(self, memory: MemoryRecord) -> None:
        self.mutations += 1
        self.new_memories[memory.id] = memory
        self.related_rewrite[memory.id] = memory
        self.flags_rewrite[memory.id] = memory

    def touch_memory(self, memory: MemoryRecord) -> None:
        self.mutations += 1
        if memory.id not in self.new_memories:
            self.touched_memories[memory.id] = memory

    def delete_memory(self, memory_id: str) -> None:
        self.mutations += 1
        self.new_memories.pop(memory_id, None)
        self.touched_memories.pop(memory_id, None)
        self.related_rewrite.pop(memory_id, None)
        self.flags_rewrite.pop(memory_id, None)
        self.memory_codes.pop(memory_id, None)
        self.new_links = {k: v for k, v in self.new_links.items() if k[1] != memory_id}
        self.touched_links = {k: v for k, v in self.touched_links.items() if k[1] != memory_id}
        self.deleted_memories.add(memory_id)

    def rewrite_related(self, memory: MemoryRecord) -> None:
        self.mutations += 1
        self.related_rewrite[memory.id] = memory

    def rewrite_flags(self, memory: MemoryRecord) -> None:
        self.mutations += 1
        self.flags_rewrite[memory.id] = memory

    def put_code(self, memory_id: str, code: bytes, fingerprint: str) -> None:
        self.mutations += 1
        self.memory_codes[memory_id] = (code, fingerprint)

    # -- keys ------------------------------------------------------------------------------
    def add_key(self, key: KeyRecord) -> None:
        self.mutations += 1
        self.new_keys[key.id] = key

    def touch_key(self, key: KeyRecord) -> None:
        self.mutations += 1
        if key.id not in self.new_keys:
            self.touched_keys[key.id] = key

    def rewrite_aliases(self, key: KeyRecord) -> None:
        self.mutations += 1
        self.alias_keys[key.id] = key

    def rewrite_candidates(self, key: KeyRecord) -> None:
        self.mutations += 1
        self.candidate_keys[key.id] = key

    def delete_key(self, key_id: str) -> None:
        self.mutations += 1
        self.new_keys.pop(key_id, None)
        self.touched_keys.pop(key_id, None)
        self.alias_keys.pop(key_id, None)
        self.candidate_keys.pop(key_id, None)
        self.new_links = {k: v for k, v in self.new_links.items() if k[0] != key_id}
        self.touched_links = {k: v for k, v in self.touched_links.items() if k[0] != key_id}
        self.deleted_keys.add(key_id)

    # -- links -----------------------------------------------------------------------------
    def add_link(self, link: LinkRecord) -> None:
        self.mutations += 1
        self.new_links[(link.key_id, link.memory_id)] = link

    def touch_link(self, link: LinkRecord) -> None:
        self.mutations += 1
        pair = (link.key_id, link.memory_id)
        if pair not in self.new_links:
            self.touched_links[pair] = link

    # -- log and feed ----------------------------------------------------------------------
    def confirm(
        self,
        memory_id: str,
        at: float,
        evidence: str,
        source: str | None,
        confirmation_id: str | None,
    ) -> None:
        self.mutations += 1
        self.confirmations.append((memory_id, at, evidence, source, confirmation_id))

    def upsert_event(self, memory: MemoryRecord) -> None:
        self.mutations += 1
        self.events.append((OP_UPSERT, memory.id, memory.namespace))

    def delete_event(self, memory: MemoryRecord) -> None:
        self.mutations += 1
        self.events.append((OP_DELETE, memory.id, memory.namespace))

    def set_meta(self, name: str, value: Any) -> None:
        self.mutations += 1
        self.meta[name] = str(value)

    def record_outcome(self, key: str, outcome: Outcome) -> None:
        self.mutations += 1
        self.outcomes[key] = outcome

    def absorb(self, later: Changes) -> None:
        """Add the rows of a write made after these, so that one transaction writes both: a
        row touched by both is written as ``later`` left it, a row it deleted is not written."""
        for memory_id in later.deleted_memories:
            self.delete_memory(memory_id)
        for key_id in later.deleted_keys:
            self.delete_key(key_id)
        self.new_memories.update(later.new_memories)
        for memory in later.touched_memories.values():
            rows = self.new_memories if memory.id in self.new_memories else self.touched_memories
            rows[memory.id] = memory
        self.new_keys.update(later.new_keys)
        for key in later.touched_keys.values():
            keys = self.new_keys if key.id in self.new_keys else self.touched_keys
            keys[key.id] = key
        self.alias_keys.update(later.alias_keys)
        self.candidate_keys.update(later.candidate_keys)
        self.new_links.update(later.new_links)
        for pair, link in later.touched_links.items():
            links = self.new_links if pair in self.new_links else self.touched_links
            links[pair] = link
        self.related_rewrite.update(later.related_rewrite)
        self.flags_rewrite.update(later.flags_rewrite)
        self.confirmations.extend(later.confirmations)
        self.events.extend(later.events)
        self.meta.update(later.meta)
        self.outcomes.update(later.outcomes)
        self.memory_codes.update(later.memory_codes)
        self.mutations += later.mutations

    def bookkeeping_only(self) -> bool:
        """Only what reading teaches (access counts, link weights, learned aliases and links)
        and memory vectors (the background pass makes a lost one again): not saving it loses
        no memory, key, confirmation or acknowledged write."""
        return not any(
            (
                self.new_memories,
                self.deleted_memories,
                self.new_keys,
                self.deleted_keys,
                self.confirmations,
                self.meta,
                self.outcomes,
            )
        )

    def empty(self) -> bool:
        return not any(
            (
                self.new_memories,
                self.touched_memories,
                self.deleted_memories,
                self.new_keys,
                self.touched_keys,
                self.deleted_keys,
                self.alias_keys,
                self.candidate_keys,
                self.new_links,
                self.touched_links,
                self.related_rewrite,
                self.flags_rewrite,
                self.confirmations,
                self.events,
                self.meta,
                self.outcomes,
                self.memory_codes,
            )
        )
