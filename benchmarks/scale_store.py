"""The synthetic stores of ``benchmarks.scale_1m``: 10k to 1M memories in seconds of CPU.

    python -m benchmarks.scale_store --memories 10000 100000 1000000 [--stores /tmp/km-scale5]
    python -m benchmarks.scale_store --memories 100000 --remember-batch 2000   # the write path

The memories are ``benchmarks.graph_bench``'s synthetic stream (4 namespaces, 3-6 Zipf-shared
keys each), but every key carries the default embedder's vector: the distinct key strings are
embedded once, in batches, by the real model (kept under ``--stores/embedded/``, in the order
that makes a smaller store's vocabulary a prefix of a larger one's, and resumed after a
kill), and the store records that model's fingerprint, so ``keymem up`` on it re-embeds
nothing.

The rows are the ones ``remember_batch`` writes for the stream (tests/test_scale_store.py
compares the two), written by DuckDB from numpy arrays in one transaction: ~0.08 ms of CPU a
memory. The real write paths cost ~0.5-0.7 ms (``remember_batch`` of 200 in process, at 10k
and 100k; ``--remember-batch``) and ~1 ms (``keymem import``: a JSON file, its validation and
the insert, one Python object per row); on the shared box at load 20-28, where a nice'd
process gets a few per cent of a core, either takes two hours or more for 1M
(docs/SCALING.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.graph_bench import (
    KEYS_PER_MEMORY,
    NAMESPACES,
    ZIPF_EXPONENT,
    vocabulary_size,
)
from keymem.protocol.limits import BATCH_MAX_ITEMS
from keymem.services.config import Settings
from keymem.services.embedder.backends import EmbeddingBackend, fingerprint, load_backend
from keymem.services.embedder.settings import EmbedderSettings
from keymem.services.graph import GraphService
from keymem.services.graph.service import BLAS_THREADS
from keymem.store.changes import OP_UPSERT
from keymem.store.database import GraphStore, graph_path

EMBED_BATCH = 1024
EMBED_WORKERS = 3
PART_KEYS = 16 * EMBED_BATCH  # keys per saved part: what a kill can cost
ID_SPACE = 2**48
ID_MIXER = 0x9E3779B97F4B % ID_SPACE | 1  # odd: n -> n * mixer is a bijection modulo 2**48
KEY_ID_BASE = 2**46  # key and batch ids from their own ranges: no id names two rows
BATCH_ID_BASE = 2**47
SECONDS_BETWEEN_MEMORIES = 0.01
DECAY_PROFILE = "standard"
EVIDENCE = "user"
BUILD_REPORT = "build.json"
BULK_MEMORY_GB = 8  # DuckDB's working memory for the 1M inserts (its aggregates and indexes)


def key_text(row: int) -> str:
    """Row ``row`` of the embedded table: namespaces interleaved, so a prefix is a vocabulary."""
    return f"ns{row % NAMESPACES} concept {row // NAMESPACES}"


class KeyVectors:
    """The default embedder's vector of every key string, embedded once and kept on disk.

    Parts of ``PART_KEYS`` rows are embedded by ``workers`` processes of one model thread each:
    on a contended box each process gets its own share of the cores.
    """

    def __init__(self, stores: Path, workers: int = EMBED_WORKERS) -> None:
        self.workers = workers
        self.folder = stores / "embedded"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.meta_path = self.folder / "meta.json"
        self.settings = replace(EmbedderSettings.from_config(Settings.from_env().config), threads=1)

    def part(self, start: int) -> Path:
        return self.folder / f"part-{start:09d}.npy"

    def fingerprint(self) -> str:
        return str(json.loads(self.meta_path.read_text())["fingerprint"])

    def embed(self, rows: int) -> dict[str, Any]:
        """Embed the parts up to ``rows`` not on disk yet; the rate of this call."""
        missing = [s for s in range(0, rows, PART_KEYS) if not self.part(s).exists()]
        if not missing and self.meta_path.exists():
            return {"keys": 0}
        started = time.perf_counter()
        with ProcessPoolExecutor(
            self.workers, initializer=_load_embedder, initargs=(self.settings, self.folder)
        ) as pool:
            for start, cpu_s in pool.map(_embed_part, [(self, s) for s in missing]):
                print(f"embedded part {start:,} ({cpu_s:.0f} s CPU)", file=sys.stderr, flush=True)
            self.meta_path.write_text(
                json.dumps({"fingerprint": pool.submit(_fingerprint).result()})
            )
        keys = len(missing) * PART_KEYS
        return {
            "keys": keys,
            "workers": self.workers,
            "keys_per_s": round(keys / (time.perf_counter() - started), 1),
        }

    def table(self, vocab: int) -> np.ndarray:
        """Vectors of shape (namespaces, vocab, dim), as ``Synthetic.vectors`` holds them."""
        rows = vocab * NAMESPACES
        self.embed(rows)
        flat = np.concatenate([np.load(self.part(s)) for s in range(0, rows, PART_KEYS)])[:rows]
        return np.ascontiguousarray(flat.reshape(vocab, NAMESPACES, -1).transpose(1, 0, 2))


_embedder: list[EmbeddingBackend] = []  # the one model of an embedding worker process


def _load_embedder(settings: EmbedderSettings, folder: Path) -> None:
    _embedder.append(load_backend(settings, folder))


def _fingerprint() -> str:
    return fingerprint(_embedder[0])


def _embed_part(job: tuple[KeyVectors, int]) -> tuple[int, float]:
    vectors, start = job
    cpu_started = time.process_time()
    texts = [key_text(r) for r in range(start, start + PART_KEYS)]
    encoded = np.concatenate(
        [
            _embedder[0].encode(texts[i : i + EMBED_BATCH], "key").vectors
            for i in range(0, len(texts), EMBED_BATCH)
        ]
    ).astype(np.float32)
    part = vectors.part(start)
    np.save(part.with_suffix(".tmp.npy"), encoded)
    os.replace(part.with_suffix(".tmp.npy"), part)
    return start, time.process_time() - cpu_started


def _counts(path: Path) -> dict[str, int]:
    with duckdb.connect(str(path), read_only=True) as conn:
        return {
            table: int(conn.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0])
            for table in ("memories", "keys", "links", "events")
        }


class Stream:
    """``Synthetic``'s stream drawn for the whole store at once with numpy: memory ``i`` in
    namespace ``i % 4``, 3-6 distinct keys drawn by the same Zipf popularity (a duplicate
    drawn again, which is sampling without replacement). ``Synthetic.item`` draws one
    memory at a time over the whole vocabulary: ~0.3 ms each at 1M, five minutes of CPU."""

    def __init__(self, memories: int, vocab: int, seed: int = 1) -> None:
        rng = np.random.default_rng(seed)
        weights = 1.0 / np.arange(1, vocab + 1) ** ZIPF_EXPONENT
        cumulative = np.cumsum(weights / weights.sum())
        counts = rng.integers(KEYS_PER_MEMORY[0], KEYS_PER_MEMORY[1] + 1, size=memories)
        self.memory = np.repeat(np.arange(memories, dtype=np.int64), counts)
        self.concept = np.searchsorted(cumulative, rng.random(len(self.memory)) * cumulative[-1])
        while True:
            pairs = self.memory * vocab + self.concept
            duplicate = np.ones(len(pairs), dtype=bool)
            duplicate[np.unique(pairs, return_index=True)[1]] = False
            if not duplicate.any():
                break
            drawn = rng.random(int(duplicate.sum())) * cumulative[-1]
            self.concept[duplicate] = np.searchsorted(cumulative, drawn)
        self.namespace = self.memory % NAMESPACES
        self.key_row = self.concept * NAMESPACES + self.namespace  # KeyVectors' row of the key


def _ids(numbers: np.ndarray) -> np.ndarray:
    """``_scrambled_id``'s number for each of ``numbers`` (uint64 wraps modulo 2**64)."""
    return ((numbers.astype(np.uint64) * np.uint64(ID_MIXER)) % np.uint64(ID_SPACE)).astype(
        np.int64
    )


BULK_SQL = (
    "CREATE TEMP MACRO hex_id(n) AS lower(lpad(to_hex(n), 12, '0'))",
    """INSERT INTO keys (id, namespace, concept, key_type, created_at, vector)
    SELECT hex_id(id), 'ns' || namespace, 'ns' || namespace || ' concept ' || concept,
        'concept', $created, vector
    FROM used_keys""",
    """INSERT INTO memories (id, namespace, content, created_at, source, supersedes,
        superseded_by, depth, access_count, last_accessed, expires_at, last_confirmed_at,
        confirmation_count, decay_profile, last_confirmation_evidence,
        last_confirmation_source, last_confirmation_id)
    SELECT hex_id(m.id), 'ns' || m.namespace, m.content, m.at, m.source, NULL, NULL, 0.0, 0,
        m.at, NULL, m.at, 1, $profile, $evidence, m.source, NULL
    FROM (
        SELECT any_value(memory_id) AS id, any_value(namespace) AS namespace,
            $created + (memory + 1) * $spacing AS at,
            '{"batch_id": "' || hex_id(any_value(batch_id)) || '"}' AS source,
            'synthetic memory ' || (memory + 1) || ' about '
                || string_agg('ns' || namespace || ' concept ' || concept, ' and ' ORDER BY pos)
                AS content
        FROM links_in GROUP BY memory
    ) AS m""",
    """INSERT INTO links (key_id, memory_id, weight, auto, learned)
    SELECT hex_id(key_id), hex_id(memory_id), 1.0, false, false FROM links_in""",
    """INSERT INTO events (seq, op, memory_id, namespace, committed_at)
    SELECT row_number() OVER (ORDER BY id), $op, id, namespace, $now FROM memories""",
)


def bulk_store(home: Path, memories: int, table: np.ndarray, fingerprint: str) -> dict[str, Any]:
    """The synthetic store in ``home`` written by DuckDB from numpy arrays in one transaction,
    its keys' vectors from ``table`` (as ``KeyVectors.table``) recorded as ``fingerprint``'s."""
    vocab = table.shape[1]
    started, cpu_started = time.perf_counter(), time.process_time()
    stream = Stream(memories, vocab)
    flat = table.reshape(NAMESPACES * vocab, -1)  # namespace-major rows
    used = np.unique(stream.key_row)
    namespace_of, concept_of = used % NAMESPACES, used // NAMESPACES
    key_vectors = flat[namespace_of * vocab + concept_of]
    store = GraphStore(graph_path(home))
    conn = store.conn
    conn.register(
        "used_keys",
        {
            "id": _ids(KEY_ID_BASE + used),
            "namespace": namespace_of,
            "concept": concept_of,
            "vector": np.array([v.tobytes() for v in key_vectors], dtype=object),
        },
    )
    within = np.arange(len(stream.memory)) - np.repeat(
        np.searchsorted(stream.memory, np.arange(memories)), np.bincount(stream.memory)
    )
    conn.register(
        "links_in",
        {
            "memory": stream.memory,
            "memory_id": _ids(stream.memory),
            "batch_id": _ids(BATCH_ID_BASE + stream.memory // BATCH_MAX_ITEMS),
            "pos": within,
            "namespace": stream.namespace,
            "concept": stream.concept,
            "key_id": _ids(KEY_ID_BASE + stream.key_row),
        },
    )
    created = time.time() - memories * SECONDS_BETWEEN_MEMORIES
    values = {
        "created": created,
        "spacing": SECONDS_BETWEEN_MEMORIES,
        "profile": DECAY_PROFILE,
        "evidence": EVIDENCE,
        "op": OP_UPSERT,
        "now": time.time(),
    }
    conn.execute(f"SET memory_limit = '{BULK_MEMORY_GB}GB'")  # the graph's own limit is small
    conn.execute("BEGIN TRANSACTION")
    for sql in BULK_SQL:
        conn.execute(sql, {name: values[name] for name in values if f"${name}" in sql})
    for name, value in (("fingerprint", fingerprint), ("dim", str(flat.shape[1]))):
        conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [name, value])
    conn.execute("COMMIT")
    store.close()
    report = {
        **_counts(graph_path(home)),
        "write_path": "bulk: DuckDB INSERT ... SELECT from numpy arrays, one transaction",
        "build_s": round(time.perf_counter() - started, 1),
        "build_cpu_s": round(time.process_time() - cpu_started, 1),
    }
    (home / BUILD_REPORT).write_text(json.dumps(report))  # written last: the store is whole
    return report


def stream_items(stream: Stream, table: np.ndarray, first: int) -> list[dict[str, Any]]:
    """``stream``'s memories as ``remember_batch`` items (numbered from ``first``)."""
    items = []
    starts = np.searchsorted(stream.memory, np.arange(stream.memory[-1] + 2))
    for memory in range(len(starts) - 1):
        at = slice(starts[memory], starts[memory + 1])
        namespace = int(stream.namespace[at][0])
        keys = [f"ns{namespace} concept {c}" for c in stream.concept[at]]
        items.append(
            {
                "content": f"synthetic memory {first + memory + 1} about {' and '.join(keys)}",
                "keys": keys,
                "key_vectors": table[namespace, stream.concept[at]],
                "namespace": f"ns{namespace}",
            }
        )
    return items


def remember_batch_rate(home: Path, vectors: KeyVectors, count: int) -> dict[str, float]:
    """The graph's own ``remember_batch`` (in process, batches of the most it takes) adding
    ``count`` more memories to a copy of the built store: memories/s and CPU ms a memory."""
    memories = json.loads((home / BUILD_REPORT).read_text())["memories"]
    table = vectors.table(vocabulary_size(memories))
    items = stream_items(Stream(count, table.shape[1], seed=2), table, memories)
    # one BLAS thread, as the graph service process has
    with tempfile.TemporaryDirectory(dir=home.parent) as work, threadpool_limits(BLAS_THREADS):
        shutil.copy(graph_path(home), graph_path(Path(work)))
        graph = GraphService(graph_path(Path(work)))
        graph.remember(items.pop())  # the lazy dedup index, outside the measurement
        started, cpu_started = time.perf_counter(), time.process_time()
        for at in range(0, len(items), BATCH_MAX_ITEMS):
            graph.remember_batch({"items": items[at : at + BATCH_MAX_ITEMS]})
        seconds, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
        graph.close()
    return {
        "remember_batch_per_s": round(len(items) / seconds, 1),
        "cpu_ms_per_memory": round(cpu_s / len(items) * 1000, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--memories", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--stores", type=Path, default=Path("/tmp/km-scale5"))
    parser.add_argument(
        "--remember-batch",
        type=int,
        default=0,
        help="instead of building: append this many memories to each built store through "
        "the graph's remember_batch, for the rate to compare with the import",
    )
    parser.add_argument(
        "--embed-workers", type=int, default=EMBED_WORKERS, help="embedding processes"
    )
    args = parser.parse_args()
    vectors = KeyVectors(args.stores, args.embed_workers)
    if not args.remember_batch:  # every key of the largest store first, with every worker
        embedded = vectors.embed(vocabulary_size(max(args.memories)) * NAMESPACES)
        print(json.dumps({"embedded": embedded}), flush=True)
    for memories in args.memories:
        home = args.stores / f"store-{memories}"
        if args.remember_batch:
            rate = remember_batch_rate(home, vectors, args.remember_batch)
            print(json.dumps({"memories": memories, **rate}), flush=True)
            continue
        home.mkdir(parents=True)
        vocab = vocabulary_size(memories)
        report = bulk_store(home, memories, vectors.table(vocab), vectors.fingerprint())
        print(json.dumps({"memories": memories, **report}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
