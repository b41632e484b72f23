"""The synthetic stores of ``benchmarks.scale_1m``, written through ``keymem import`` in chunks.

    python -m benchmarks.scale_store --memories 10000 100000 1000000 [--stores /tmp/km-scale5]

The memories are ``benchmarks.graph_bench``'s synthetic stream (4 namespaces, 3-6 Zipf-shared
keys each), but every key carries the default embedder's vector: the distinct key strings are
embedded once, in batches, by the real model (kept under ``--stores/embedded/``, in the order
that makes a smaller store's vocabulary a prefix of a larger one's, and resumed after a
kill), and the store records that model's fingerprint, so ``keymem up`` on it re-embeds
nothing. A store is written as export-format files of ``IMPORT_CHUNK`` memories each, every
file through the real ``keymem import`` (the whole file validated against the graph's row
rules, one transaction, change-feed events for the lexicon). The graph's own
``remember_batch`` resolves each key and commits each batch of at most 200: about 50 memories
a second on this box, five hours for 1M (docs/SCALING.md).
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

from benchmarks.deployment import BenchHome, home_env
from benchmarks.graph_bench import NAMESPACES, Synthetic
from keymem.protocol.limits import BATCH_MAX_ITEMS
from keymem.services.config import Settings
from keymem.services.embedder.backends import EmbeddingBackend, fingerprint, load_backend
from keymem.services.embedder.settings import EmbedderSettings
from keymem.services.graph import GraphService
from keymem.services.graph.service import BLAS_THREADS
from keymem.store.database import graph_path, memory_row
from keymem.store.portable import EXPORT_FORMAT, EXPORT_VERSION, EXPORTED_TABLES
from keymem.store.records import LinkRecord, MemoryRecord
from keymem.store.schema import SCHEMA_VERSION, migrate

EMBED_BATCH = 1024
EMBED_WORKERS = 3
PART_KEYS = 16 * EMBED_BATCH  # keys per saved part: what a kill can cost
IMPORT_CHUNK = 100_000
ID_DIGITS = 12
ID_SPACE = 2**48
ID_MIXER = 0x9E3779B97F4B % ID_SPACE | 1  # odd: n -> n * mixer is a bijection modulo 2**48
KEY_ID_BASE = 2**46  # key and batch ids from their own ranges: no id names two rows
BATCH_ID_BASE = 2**47
SECONDS_BETWEEN_MEMORIES = 0.01
DECAY_PROFILE = "standard"
EVIDENCE = "user"
BUILD_REPORT = "build.json"


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


def _scrambled_id(n: int) -> str:
    """A distinct 12-hex-digit id per ``n`` (< 2**48) that looks like the graph's own ids."""
    return f"{(n * ID_MIXER) % ID_SPACE:0{ID_DIGITS}x}"


def _columns() -> dict[str, list[str]]:
    """Each exported table's columns in this schema's order."""
    conn = duckdb.connect()
    migrate(conn)
    return {
        table: [str(row[0]) for row in conn.execute(f"DESCRIBE {table}").fetchall()]
        for table in EXPORTED_TABLES
    }


class ExportChunks:
    """The synthetic stream as export documents, each with the keys its memories use first."""

    def __init__(self, data: Synthetic, fingerprint: str, created_at: float) -> None:
        self.data = data
        self.fingerprint = fingerprint
        self.created_at = created_at
        self.columns = _columns()
        self.written: dict[str, str] = {}  # key text -> key id, for keys already exported
        self.memories = 0

    def _key_id(self, namespace: int, concept: str, vector: np.ndarray, new: list[Any]) -> str:
        key_id = self.written.get(concept)
        if key_id is None:
            key_id = _scrambled_id(KEY_ID_BASE + len(self.written))
            self.written[concept] = key_id
            new.append(
                [
                    key_id,
                    self.data.namespaces[namespace],
                    concept,
                    "concept",
                    self.created_at,
                    [float(x) for x in vector],
                ]
            )
        return key_id

    def next(self, count: int) -> dict[str, Any]:
        keys: list[Any] = []
        memories: list[Any] = []
        links: list[Any] = []
        source = json.dumps({"batch_id": _scrambled_id(BATCH_ID_BASE + self.memories)})
        for _ in range(count):
            item = self.data.item()
            namespace = self.data.namespaces.index(item["namespace"])
            memory_id = _scrambled_id(self.memories)
            self.memories += 1
            now = self.created_at + self.memories * SECONDS_BETWEEN_MEMORIES
            memories.append(
                list(
                    memory_row(
                        MemoryRecord(
                            id=memory_id,
                            namespace=item["namespace"],
                            content=item["content"],
                            created_at=now,
                            source=source,
                            last_accessed=now,
                            last_confirmed_at=now,
                            confirmation_count=1,
                            decay_profile=DECAY_PROFILE,
                            last_confirmation_evidence=EVIDENCE,
                            last_confirmation_source=source,
                        )
                    )
                )
            )
            for concept, vector in zip(item["keys"], item["key_vectors"], strict=True):
                link = LinkRecord(self._key_id(namespace, concept, vector, keys), memory_id)
                links.append([link.key_id, link.memory_id, link.weight, link.auto, link.learned])
        rows = {"keys": keys, "memories": memories, "links": links}
        return {
            "format": EXPORT_FORMAT,
            "version": EXPORT_VERSION,
            "schema_version": SCHEMA_VERSION,
            "exported_at": time.time(),
            "meta": {"fingerprint": self.fingerprint, "dim": str(self.data.vectors.shape[2])},
            "tables": {
                table: {"columns": self.columns[table], "rows": rows.get(table, [])}
                for table in EXPORTED_TABLES
            },
        }


def keymem_import(home: Path, document: dict[str, Any], folder: Path) -> float:
    """``keymem import`` of ``document`` into ``home`` as a user runs it; its wall seconds."""
    with tempfile.NamedTemporaryFile("w", dir=folder, suffix=".json") as handle:
        json.dump(document, handle, separators=(",", ":"))
        handle.flush()
        started = time.perf_counter()
        BenchHome(home, home_env(home)).keymem("import", handle.name)
        return time.perf_counter() - started


def _counts(path: Path) -> dict[str, int]:
    with duckdb.connect(str(path), read_only=True) as conn:
        return {
            table: int(conn.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0])
            for table in ("memories", "keys", "links", "events")
        }


def build_store(home: Path, memories: int, vectors: KeyVectors) -> dict[str, Any]:
    """Write the synthetic store of ``memories`` into ``home`` (empty) through keymem import;
    its report, also kept as ``home/build.json``."""
    data = Synthetic(memories)
    vocab = len(data.words[data.namespaces[0]])
    data.vectors = vectors.table(vocab)
    chunks = ExportChunks(
        data, vectors.fingerprint(), time.time() - memories * SECONDS_BETWEEN_MEMORIES
    )
    started = time.perf_counter()
    import_s = 0.0
    for start in range(0, memories, IMPORT_CHUNK):
        document = chunks.next(min(IMPORT_CHUNK, memories - start))
        import_s += keymem_import(home, document, home.parent)
        print(f"imported {chunks.memories:,} / {memories:,}", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - started
    report = {
        **_counts(graph_path(home)),
        "write_path": f"keymem import, files of {IMPORT_CHUNK:,} memories",
        "import_s": round(import_s, 1),
        "build_s": round(seconds, 1),
        "imported_per_s": round(memories / import_s, 1),
    }
    (home / BUILD_REPORT).write_text(json.dumps(report))  # written last: the store is whole
    return report


def remember_batch_rate(home: Path, memories: int, vectors: KeyVectors, count: int) -> float:
    """Memories/s of the graph's own ``remember_batch`` (in process, batches of the most it
    takes) appending ``count`` more of the stream to a copy of the built store."""
    data = Synthetic(memories)
    data.vectors = vectors.table(len(data.words[data.namespaces[0]]))
    for _ in range(memories):  # past the memories the store already holds
        data.item()
    # one BLAS thread, as the graph service process has
    with tempfile.TemporaryDirectory(dir=home.parent) as work, threadpool_limits(BLAS_THREADS):
        shutil.copy(graph_path(home), graph_path(Path(work)))
        graph = GraphService(graph_path(Path(work)))
        graph.remember(data.item())  # the lazy dedup index, outside the measurement
        started = time.perf_counter()
        for _ in range(0, count, BATCH_MAX_ITEMS):
            graph.remember_batch({"items": [data.item() for _ in range(BATCH_MAX_ITEMS)]})
        seconds = time.perf_counter() - started
        graph.close()
    return round(count / seconds, 1)


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
        largest = Synthetic(max(args.memories))
        embedded = vectors.embed(len(largest.words["ns0"]) * NAMESPACES)
        print(json.dumps({"embedded": embedded}), flush=True)
        del largest
    for memories in args.memories:
        home = args.stores / f"store-{memories}"
        if args.remember_batch:
            rate = remember_batch_rate(home, memories, vectors, args.remember_batch)
            print(json.dumps({"memories": memories, "remember_batch_per_s": rate}), flush=True)
            continue
        home.mkdir(parents=True)
        report = build_store(home, memories, vectors)
        print(json.dumps({"memories": memories, **report}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
