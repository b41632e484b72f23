"""The graph's DuckDB connection works in a bounded memory pool: batched writes into a store
whose links are many times that pool keep committing (at 1M memories the links' primary-key
index filled the 256 MB pool after a few remember_batch calls of 100)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from keymem.store import database
from keymem.store.changes import Changes
from keymem.store.database import GraphStore
from keymem.store.records import LinkRecord, MemoryRecord

STORE_MEMORIES = 60_000
STORE_KEYS = 20_000
LINKS_PER_MEMORY = 5  # 300k links: a links index of ~19 MB, past the pool below
# What a batch's own inserts pin (a block per column appended) fits; the whole links index not.
POOL_LIMIT = "16MB"
BATCHES = 4
BATCH_MEMORIES = 100


def _fill(path: Path) -> list[str]:
    """A store of ``STORE_MEMORIES`` memories linked to random keys, written in bulk; returns
    the key ids."""
    store = GraphStore(path)
    conn = store.conn
    conn.execute("BEGIN TRANSACTION")
    conn.execute(
        "INSERT INTO memories (id, namespace, content, created_at, depth, access_count, "
        "last_accessed, last_confirmed_at, confirmation_count, decay_profile) "
        "SELECT md5('m' || i)[:12], 'default', 'memory ' || i, 0, 0.5, 0, 0, 0, 1, 'standard' "
        "FROM range(?) t(i)",
        [STORE_MEMORIES],
    )
    conn.execute(
        "INSERT INTO links (key_id, memory_id, weight, auto) "
        "SELECT md5('k' || ((i * 7919 + j * 104729) % ?))[:12], md5('m' || i)[:12], 1.0, false "
        "FROM range(?) t(i), range(?) u(j)",
        [STORE_KEYS, STORE_MEMORIES, LINKS_PER_MEMORY],
    )
    conn.execute("COMMIT")
    keys = [str(k) for (k,) in conn.execute("SELECT DISTINCT key_id FROM links").fetchall()]
    store.close()
    return keys


def _batch(keys: list[str], rng: random.Random) -> Changes:
    """What a remember_batch of ``BATCH_MEMORIES`` new memories commits: memories, links to
    keys spread over the whole store, their events."""
    changes = Changes()
    now = time.time()
    for _ in range(BATCH_MEMORIES):
        memory = MemoryRecord(rng.randbytes(6).hex(), "default", "a new fact", now)
        changes.add_memory(memory)
        changes.upsert_event(memory)
        for key_id in rng.sample(keys, LINKS_PER_MEMORY):
            changes.add_link(LinkRecord(key_id, memory.id))
    return changes


def test_batched_writes_commit_in_a_pool_smaller_than_the_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / database.GRAPH_FILE_NAME
    keys = _fill(path)
    monkeypatch.setattr(database, "DUCKDB_MEMORY_LIMIT", POOL_LIMIT)
    rng = random.Random(7)
    written: list[str] = []
    store = GraphStore(path)
    try:
        head = 0
        for _ in range(BATCHES):
            changes = _batch(keys, rng)
            head = store.commit(changes, head)  # raised OutOfMemoryException with a links PK
            written.extend(changes.new_memories)
            # the lexicon's feed reads every event in between
            assert len(store.events_after(0, STORE_MEMORIES)) == len(written)
    finally:
        store.close()
    monkeypatch.undo()  # the load reads every row: the usual pool
    reopened = GraphStore(path)
    try:
        loaded = reopened.load()
    finally:
        reopened.close()
    assert set(written) <= set(loaded.memories)
    assert len(loaded.memories) == STORE_MEMORIES + BATCHES * BATCH_MEMORIES
    assert len(loaded.links.memory_id) == (STORE_MEMORIES + len(written)) * LINKS_PER_MEMORY
