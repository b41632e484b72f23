"""An approximate nearest-key index for a namespace with many concept keys, kept on disk.

The exact key scan is one float32 matrix-vector product per query vector: 3 ms CPU over the 9k
keys of a 100k store's namespace, 32-34 ms over the 94k of a 1M store's, and a search sends the
query and each of its phrases. Above ``KEYMEM_KEY_ANN_MIN_KEYS`` concept keys a namespace also
keeps its concept keys in an HNSW graph (usearch: int8 vectors, inner product), asks it for
twice the candidates it needs and ranks those by their cosines from the namespace's matrix
(held in half precision once the index serves: ``KeyIndex.halve``), so a search costs
milliseconds whatever the namespace's size
(docs/SCALING.md "What each tool buys" has the measurements that chose usearch over faiss and
voyager). Below the threshold — every
size ``keymem eval`` runs — search stays exact.

Building the graph costs about 0.15 ms CPU per key (~13 s for 88k keys), so it is not
done at every start: it is saved next to the graph file (``key-ann/``) with each key's label
and a digest of its vector, and a start loads it, checks the files' checksums, and catches up
with what changed since it was saved (keys added, deleted, re-embedded) exactly as live writes
do. A missing, corrupt or foreign file (another embedding, dimension or format) is rebuilt. All
of that runs on one background thread from a snapshot of the keys, while the namespace is
served exactly; writes meanwhile are queued and applied when the index is handed over.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import json
import logging
import os
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from usearch.index import Index

log = logging.getLogger("keymem.graph.keyann")

FORMAT = 1
DIRECTORY = "key-ann"
# HNSW parameters (measured on 60k real key embeddings: docs/SCALING.md): 16 links per node,
# 128 candidates while inserting; a search looks at 256 (recall@10 0.983 against the exact scan
# for 3.1 ms CPU, where 128 gave 0.963 for 2.3 ms) and returns CANDIDATE_FACTOR times what the
# caller asked (at least MIN_CANDIDATES), which the namespace's matrix then ranks.
CONNECTIVITY = 16
ADD_EXPANSION = 128
SEARCH_EXPANSION = 256
# A write's lookup of the one concept key nearest a key it coins (``KeyIndex.best_concept``)
# decides a merge (a near-duplicate: cosine >= 0.96 on USE-m) and a near-key hint, and looks
# less far: over 57k real keys, 3,000 held out and looked up as coined (``python -m
# benchmarks.key_ann --coined 3000``, two runs), 0.29-0.34 ms CPU a lookup against 0.80-0.88
# at SEARCH_EXPANSION, the same 137 merges, the same hint decision for 99.9 % (the same nearest
# key 97.9 %).
LOOKUP_EXPANSION = 64
CANDIDATE_FACTOR = 2
MIN_CANDIDATES = 32
# The graph walks int8 vectors: half float16's CPU and 45 % of its memory, the same candidates
# within 0.003 of recall@10 once ranked from the matrix. Its own scores are not cosines (a
# write's merge decisions taken from them went wrong for 95 % of coined keys), so nothing reads
# them: docs/SCALING.md "What each tool buys".
VECTOR_DTYPE = "i8"
# A saved index that misses more than this share of the namespace is rebuilt, not caught up.
CATCH_UP_MAX_SHARE = 0.5
CHECKSUM_CHUNK_BYTES = 1 << 24
WORD_HALVES = 4
BACKGROUND_NICE = 10  # the build shares the box with the serving loop: it yields first


@functools.cache
def _usearch() -> ModuleType:
    """``usearch.index``, imported when a namespace first needs an index, and after
    onnxruntime where that is installed: onnxruntime 1.32 imported after usearch 2.26 in one
    process dies in its C++ start-up (SIGSEGV in libstdc++'s codecvt; the other order works).
    The services run in separate processes, but tests and in-process evals hold both."""
    if importlib.util.find_spec("onnxruntime") is not None:
        importlib.import_module("onnxruntime")
    return importlib.import_module("usearch.index")


def _library() -> str:
    return f"usearch {version('usearch')}"


@functools.cache
def _digest_multipliers(words: int) -> np.ndarray:
    """One odd 64-bit multiplier per word of a row (the same for every call: a saved digest
    must match the one a later start computes)."""
    seed = hashlib.shake_128(b"keymem key-ann digest").digest(8 * words)
    multipliers: np.ndarray = np.frombuffer(seed, dtype=np.uint64) | np.uint64(1)
    multipliers.flags.writeable = False
    return multipliers


def digest_vectors(vectors: np.ndarray) -> np.ndarray:
    """A 64-bit digest per row of vectors rounded to half precision: a changed
    vector, a re-embedded key or another model's vectors no longer match their saved digest.
    A new key's write digests one row: the multipliers are made once per width, and a row
    whose width is whole words is not copied to pad it (0.10 ms of a 1M store's key write)."""
    half = np.ascontiguousarray(vectors, dtype=np.float16)
    pad = -half.shape[1] % WORD_HALVES  # read as 64-bit words: 4 halves each
    words = (np.pad(half, ((0, 0), (0, pad))) if pad else half).view(np.uint64)
    multipliers = _digest_multipliers(words.shape[1])
    with np.errstate(over="ignore"):
        digests: np.ndarray = (words * multipliers).sum(axis=1, dtype=np.uint64)
    return digests


@dataclass(frozen=True)
class Snapshot:
    """A namespace's concept keys at one moment, copied so a background thread may read them
    while the serving thread writes (half precision: what the digests and a halved matrix
    hold)."""

    namespace: str
    fingerprint: str | None
    ids: list[str]
    vectors: np.ndarray  # float16 [n, dim]

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])


class HnswKeys:
    """Concept keys in an HNSW graph, each under a stable integer label (rows of the exact
    matrix move on delete; labels do not)."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.index: Index = _usearch().Index(
            ndim=dim,
            metric="ip",
            dtype=VECTOR_DTYPE,
            connectivity=CONNECTIVITY,
            expansion_add=ADD_EXPANSION,
            expansion_search=SEARCH_EXPANSION,
        )
        self.label_of: dict[str, int] = {}
        # by label (labels are dense from 0): the key id ("" once removed) and vector digest
        self.key_of: list[str] = []
        self.digests = np.zeros(0, dtype=np.uint64)

    def __len__(self) -> int:
        return len(self.label_of)

    def add_many(self, ids: list[str], vectors: np.ndarray) -> None:
        if not ids:
            return
        start, end = len(self.key_of), len(self.key_of) + len(ids)
        half = np.asarray(vectors, dtype=np.float16)
        self.index.add(np.arange(start, end, dtype=np.uint64), half, threads=1)
        if end > len(self.digests):  # grown by doubling: one write copies nothing
            grown = np.zeros(max(end, 2 * len(self.digests)), dtype=np.uint64)
            grown[:start] = self.digests[:start]
            self.digests = grown
        self.digests[start:end] = digest_vectors(half)
        self.key_of.extend(ids)
        self.label_of.update(zip(ids, range(start, end), strict=True))

    def remove(self, key_id: str) -> None:
        label = self.label_of.pop(key_id, None)
        if label is None:
            return
        self.key_of[label] = ""
        self.index.remove(label)

    def search(
        self, vectors: np.ndarray, count: int, expansion: int = SEARCH_EXPANSION
    ) -> list[list[str]]:
        """The ids of about ``count`` nearest keys of each row of ``vectors`` (m, dim), in no
        order the caller may trust (the index's own scores are not cosines), looking at
        ``expansion`` candidates (at least ``count``)."""
        count = min(count, len(self.label_of))
        if count == 0:
            return [[] for _ in vectors]
        self.index.expansion_search = expansion  # type: ignore[misc]  # a setter, not in its stubs
        matches = self.index.search(vectors, count, threads=1)
        rows = (
            zip(matches.keys, matches.counts.tolist(), strict=True)
            if isinstance(matches, _usearch().BatchMatches)
            else [(matches.keys, len(matches.keys))]  # one row: unbatched
        )
        key_of = self.key_of
        return [[key_of[label] for label in labels[:hits].tolist()] for labels, hits in rows]

    # -- persistence -----------------------------------------------------------------------
    def save(self, stem: Path, snapshot_meta: dict[str, Any]) -> None:
        """Write the index and its labels under new names, then the manifest naming them with
        their checksums, then remove the previous ones: a crash at any point leaves either the
        old set or the new one whole."""
        stem.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        ids = list(self.label_of)
        labels = np.fromiter(self.label_of.values(), dtype=np.uint64, count=len(ids))
        generation = f"{stem.name}.{secrets.token_hex(4)}"
        labels_path = stem.with_name(f"{generation}.labels.npz")
        index_path = stem.with_name(f"{generation}.usearch")
        _write(
            labels_path,
            lambda path: np.savez(
                path,
                ids=np.array(ids, dtype=str),
                labels=labels,
                digests=self.digests[labels.astype(np.intp)],
                next_label=np.array(len(self.key_of), dtype=np.uint64),
            ),
        )
        _write(index_path, lambda path: self.index.save(str(path)))
        manifest = {
            **snapshot_meta,
            "format": FORMAT,
            "library": _library(),
            "params": _params(self.dim),
            "count": len(ids),
            "files": {"index": index_path.name, "labels": labels_path.name},
            "checksums": {"index": _checksum(index_path), "labels": _checksum(labels_path)},
        }
        manifest_path = stem.with_suffix(".json")
        _write(manifest_path, lambda path: path.write_text(json.dumps(manifest)))
        for old in stem.parent.glob(f"{stem.name}.*"):
            if old != manifest_path and not old.name.startswith(generation):
                old.unlink(missing_ok=True)

    @classmethod
    def load(cls, stem: Path, expected: dict[str, Any]) -> HnswKeys:
        """The saved index when every check passes; ``StaleIndex`` says why not."""
        manifest_path = stem.with_suffix(".json")
        if not manifest_path.exists():
            raise StaleIndex("no saved index")
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, ValueError) as exc:
            raise StaleIndex(f"unreadable manifest: {exc}") from exc
        if not isinstance(manifest, dict):
            raise StaleIndex("unreadable manifest")
        for field, wanted in {
            **expected,
            "format": FORMAT,
            "library": _library(),
            "params": _params(int(expected["dim"])),
        }.items():
            if manifest.get(field) != wanted:
                raise StaleIndex(f"{field} is {manifest.get(field)!r}, not {wanted!r}")
        files = manifest.get("files") or {}
        checksums = manifest.get("checksums") or {}
        paths = {}
        for name in ("index", "labels"):
            file_name = files.get(name)
            if not isinstance(file_name, str) or not file_name.startswith(f"{stem.name}."):
                raise StaleIndex(f"the manifest names no {name} file of this namespace")
            path = stem.with_name(Path(file_name).name)
            if not path.exists() or _checksum(path) != checksums.get(name):
                raise StaleIndex(f"the {name} file does not match its checksum")
            paths[name] = path
        index_path, labels_path = paths["index"], paths["labels"]
        keys = cls(int(expected["dim"]))
        try:
            with np.load(labels_path, allow_pickle=False) as saved:
                ids = [str(k) for k in saved["ids"].tolist()]
                labels = saved["labels"].astype(np.intp)
                digests = saved["digests"].astype(np.uint64)
                next_label = int(saved["next_label"])
            keys.index.load(str(index_path))
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise StaleIndex(f"unreadable index: {exc}") from exc
        if not (
            len(ids) == len(labels) == len(digests) == len(keys.index) == manifest.get("count")
        ) or len(set(labels.tolist())) != len(ids):
            raise StaleIndex("the index and its labels disagree")
        keys.label_of = dict(zip(ids, labels.tolist(), strict=True))
        if len(keys.label_of) != len(ids) or (
            len(labels) and (labels.min() < 0 or labels.max() >= next_label)
        ):
            raise StaleIndex("the labels are not unique or out of range")
        keys.key_of = [""] * next_label
        for key_id, label in keys.label_of.items():
            keys.key_of[label] = key_id
        keys.digests = np.zeros(next_label, dtype=np.uint64)
        keys.digests[labels] = digests
        return keys

    def catch_up(self, snapshot: Snapshot) -> int:
        """Bring a loaded index to ``snapshot``: drop keys gone or re-embedded, add the rest.
        Returns how many keys changed."""
        digests = digest_vectors(snapshot.vectors)
        current = dict(zip(snapshot.ids, digests.tolist(), strict=True))
        saved = self.digests[np.fromiter(self.label_of.values(), np.intp, len(self.label_of))]
        gone = [
            k for k, d in zip(self.label_of, saved.tolist(), strict=True) if current.get(k) != d
        ]
        for key_id in gone:
            self.remove(key_id)
        rows = [i for i, key_id in enumerate(snapshot.ids) if key_id not in self.label_of]
        self.add_many([snapshot.ids[i] for i in rows], snapshot.vectors[rows])
        return len(gone) + len(rows)


class StaleIndex(Exception):
    """A saved index that must not be used (missing, corrupt, or of another key space)."""


def _params(dim: int) -> dict[str, Any]:
    return {
        "dim": dim,
        "metric": "ip",
        "dtype": VECTOR_DTYPE,
        "connectivity": CONNECTIVITY,
        "expansion_add": ADD_EXPANSION,
    }


def _checksum(path: Path) -> str:
    digest = hashlib.blake2b(digest_size=16)
    with path.open("rb") as handle:
        while chunk := handle.read(CHECKSUM_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _write(path: Path, fill: Any) -> None:
    """``fill(temporary)``, fsynced, then renamed over ``path`` (0600)."""
    # same suffix: numpy adds ".npz" to a name without it
    temporary = path.with_name(f"{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        fill(temporary)
        os.chmod(temporary, 0o600)
        with temporary.open("rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()


def stem_for(directory: Path, namespace: str) -> Path:
    """One namespace's files (namespaces may hold any character; file names may not)."""
    return directory / hashlib.blake2b(namespace.encode(), digest_size=10).hexdigest()


def prepare(stem: Path, snapshot: Snapshot) -> HnswKeys:
    """The index for ``snapshot``: the saved one caught up when it is sound, else a new one;
    saved when it changed. Runs on the background thread."""
    meta = {
        "namespace": snapshot.namespace,
        "dim": snapshot.dim,
        "fingerprint": snapshot.fingerprint,
    }
    try:
        keys = HnswKeys.load(stem, meta)
        stale = len(set(keys.label_of) - set(snapshot.ids)) + len(
            set(snapshot.ids) - set(keys.label_of)
        )
        if stale > CATCH_UP_MAX_SHARE * max(1, len(snapshot.ids)):
            raise StaleIndex(f"{stale} of {len(snapshot.ids)} keys changed since it was saved")
        changed = keys.catch_up(snapshot)
        log.info(
            "key index of %r loaded (%d keys, %d caught up)",
            snapshot.namespace,
            len(keys),
            changed,
        )
    except StaleIndex as why:
        log.info("key index of %r is rebuilt: %s", snapshot.namespace, why)
        keys = HnswKeys(snapshot.dim)
        keys.add_many(snapshot.ids, snapshot.vectors)
        changed = len(keys)
        log.info("key index of %r built (%d keys)", snapshot.namespace, len(keys))
    if changed:
        try:
            keys.save(stem, meta)
        except OSError as exc:  # a full or read-only disk: serve it, build again next start
            log.warning("key index of %r not saved: %s", snapshot.namespace, exc)
    return keys


def candidates_for(take: int) -> int:
    """How many candidates the index returns for ``take`` keys (the best ``take`` kept)."""
    return max(MIN_CANDIDATES, CANDIDATE_FACTOR * take)


class Approximate:
    """One namespace's approximate index through its life: prepared on a background thread,
    then kept in step with every key write. Until it is ready, writes queue and search is
    exact. The thread is a daemon: a stop never waits for a build (the files it leaves half
    written fail their checksums and are rebuilt)."""

    one_at_a_time = threading.Lock()  # builds share two cores with everything else

    def __init__(self, stem: Path, snapshot: Snapshot) -> None:
        self.stem = stem
        self.meta = {
            "namespace": snapshot.namespace,
            "dim": snapshot.dim,
            "fingerprint": snapshot.fingerprint,
        }
        self.keys: HnswKeys | None = None
        self.pending: list[tuple[str, np.ndarray | None]] = []  # (key id, vector or delete)
        self.failed = False
        self.prepared: HnswKeys | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(
            target=self._prepare, args=(snapshot,), name="key-ann", daemon=True
        )
        self.thread.start()

    def _prepare(self, snapshot: Snapshot) -> None:
        with self.one_at_a_time:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
            try:
                self.prepared = prepare(self.stem, snapshot)
            except Exception:
                log.exception("the key index of %r could not be prepared", snapshot.namespace)
            finally:
                self.done.set()

    def ready(self) -> bool:
        """True once the index serves; the first call after the background work finished
        applies the writes queued meanwhile (on the serving thread)."""
        if self.keys is not None:
            return True
        if self.failed or not self.done.is_set():
            return False
        if self.prepared is None:
            self.failed = True
            return False
        self.keys, self.prepared = self.prepared, None
        for key_id, vector in self.pending:
            self._apply(key_id, vector)
        self.pending = []
        return True

    def put(self, key_id: str, vector: np.ndarray | None) -> None:
        """A concept key written (``vector``) or gone (None); queued while the index is being
        prepared, dropped if preparing it failed (the namespace is then searched exactly)."""
        if self.ready():
            self._apply(key_id, vector)
        elif not self.failed:
            self.pending.append((key_id, None if vector is None else vector.copy()))

    def put_many(self, key_ids: list[str], vectors: np.ndarray) -> None:
        """Concept keys written (one row of ``vectors`` each) into the serving index, in one
        insert (usearch's per-call cost is ~10 % of a key's at 1M)."""
        assert self.keys is not None, "put_many serves a ready index"
        for key_id in key_ids:
            self.keys.remove(key_id)
        self.keys.add_many(key_ids, vectors)

    def _apply(self, key_id: str, vector: np.ndarray | None) -> None:
        if vector is not None:
            self.put_many([key_id], vector[None, :])
        else:
            assert self.keys is not None
            self.keys.remove(key_id)


class Indexed(Protocol):
    """What the manager needs of a namespace's ``KeyIndex``."""

    approximate: Approximate | None

    def concept_count(self) -> int: ...

    def snapshot(self, namespace: str, fingerprint: str | None) -> Snapshot: ...


class KeyAnn:
    """Attaches an approximate index to every namespace with at least ``min_keys`` concept
    keys (0: none). ``tick`` runs from the serving loop. Nothing is saved at stop (a large
    index would not be written within the stop deadline): the next start catches the saved
    index up with the writes since, and saves it again, in the background."""

    def __init__(self, directory: Path, min_keys: int) -> None:
        self.directory = directory
        self.min_keys = min_keys

    def tick(self, indexes: Mapping[str, Indexed], fingerprint: str | None) -> None:
        if self.min_keys <= 0:
            return
        for namespace, index in indexes.items():
            if index.approximate is not None:
                index.approximate.ready()  # hands a finished build over
            elif index.concept_count() >= self.min_keys:
                snapshot = index.snapshot(namespace, fingerprint)
                index.approximate = Approximate(stem_for(self.directory, namespace), snapshot)
