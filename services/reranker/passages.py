"""Passage vectors kept on disk, so a restart does not make every pool cold again.

A passage's vector is a pure function of its text and the embedding model's fingerprint, so
it is stored by a digest of the text in a directory named after the fingerprint: another model
never reads it. Two append-only files: ``index`` (one ``INDEX_RECORD`` per vector: the text's
digest and whether the model cut the text) and ``vectors`` (float16 rows, the same order).
Rows are read with ``pread``, not memory-mapped: a pool's hundred rows cost a hundred small
reads, and a file of a million rows adds nothing to the process's resident memory (the page
cache holds what is read). The digests live in memory as one sorted array (24 bytes a row).

Appends take an exclusive ``flock`` on the index, so several processes (reranker workers of
one home) may share the directory; each sees the others' rows at its next start. A crash
between the two appends leaves vectors without digests: the next append, or the next start,
cuts both files back to the rows they share. Nothing here is ever needed for correctness: any
failure to read or write leaves the scorer embedding as it would without the store. Like the
LRU in front of it, one store is used from its worker's serving thread only.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from keymem.services.embedder.cache import Cached

log = logging.getLogger("keymem.reranker")

DIGEST_BYTES = 16  # blake2b-128: no two texts of a store share a digest in practice
INDEX_RECORD = np.dtype([("digest", f"S{DIGEST_BYTES}"), ("truncated", "u1")])
VECTOR_DTYPE = np.dtype("<f2")
# Rows appended since start are looked up in a dict until they are this share of the sorted
# array (at least ``MERGE_MIN_ROWS``), then merged into it: merges cost O(n log n) in all.
MERGE_SHARE = 8
MERGE_MIN_ROWS = 4096


def digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=DIGEST_BYTES).digest()


def store_dir(root: Path, fingerprint: str) -> Path:
    """The directory of one model's vectors: its fingerprint in characters a path allows, and a
    digest of it whole, so two fingerprints never share one."""
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", fingerprint)
    return root / f"{readable}-{hashlib.blake2b(fingerprint.encode(), digest_size=4).hexdigest()}"


class PassageStore:
    """Persisted passage vectors of one embedding model (float16), keyed by text digest."""

    def __init__(self, directory: Path, dim: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.row_bytes = dim * VECTOR_DTYPE.itemsize
        self.dim = dim
        self._index = os.open(directory / "index", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        self._vectors = os.open(directory / "vectors", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        self._fresh: dict[bytes, tuple[int, bool]] = {}
        with self._locked():
            rows = self._aligned_rows()
            records = np.fromfile(directory / "index", dtype=INDEX_RECORD, count=rows)
        order = np.argsort(records["digest"], kind="stable")
        self._digests = records["digest"][order]
        self._rows = order.astype(np.int64)
        self._truncated = records["truncated"][order].astype(bool)

    def __len__(self) -> int:
        return len(self._digests) + len(self._fresh)

    def _locked(self) -> _Flock:
        return _Flock(self._index)

    def _aligned_rows(self) -> int:
        """Rows both files hold whole, the files cut back to them (call under the lock)."""
        rows = min(
            os.fstat(self._index).st_size // INDEX_RECORD.itemsize,
            os.fstat(self._vectors).st_size // self.row_bytes,
        )
        os.ftruncate(self._index, rows * INDEX_RECORD.itemsize)
        os.ftruncate(self._vectors, rows * self.row_bytes)
        return rows

    def _where(self, key: bytes) -> tuple[int, bool] | None:
        fresh = self._fresh.get(key)
        if fresh is not None:
            return fresh
        at = int(np.searchsorted(self._digests, key))
        # numpy reads an S16 element without its trailing zero bytes
        if at < len(self._digests) and self._digests[at] == key.rstrip(b"\0"):
            return int(self._rows[at]), bool(self._truncated[at])
        return None

    def get_many(self, texts: Iterable[str]) -> dict[str, Cached]:
        """The stored vector of each text that has one (as float32)."""
        found: dict[str, Cached] = {}
        for text in texts:
            where = self._where(digest(text))
            if where is None:
                continue
            row, truncated = where
            raw = os.pread(self._vectors, self.row_bytes, row * self.row_bytes)
            if len(raw) != self.row_bytes:  # the file was cut short outside keymem: embed again
                continue
            vector = np.frombuffer(raw, dtype=VECTOR_DTYPE).astype(np.float32)
            found[text] = Cached(vector, truncated)
        return found

    def add(self, entries: dict[str, Cached]) -> None:
        """Append the vectors (as float16) of the texts not yet stored."""
        new = {digest(text): entry for text, entry in entries.items()}
        new = {key: entry for key, entry in new.items() if self._where(key) is None}
        if not new:
            return
        records = np.empty(len(new), dtype=INDEX_RECORD)
        records["digest"] = list(new)
        records["truncated"] = [entry.truncated for entry in new.values()]
        vectors = np.stack([entry.vector for entry in new.values()]).astype(VECTOR_DTYPE)
        with self._locked():
            first = self._aligned_rows()
            os.write(self._vectors, vectors.tobytes())
            os.write(self._index, records.tobytes())
        for i, (key, entry) in enumerate(new.items()):
            self._fresh[key] = (first + i, entry.truncated)
        if len(self._fresh) >= max(MERGE_MIN_ROWS, len(self._digests) // MERGE_SHARE):
            self._merge()

    def _merge(self) -> None:
        keys = np.array(list(self._fresh), dtype=f"S{DIGEST_BYTES}")
        rows = np.array([row for row, _ in self._fresh.values()], dtype=np.int64)
        truncated = np.array([t for _, t in self._fresh.values()], dtype=bool)
        digests = np.concatenate([self._digests, keys])
        order = np.argsort(digests, kind="stable")
        self._digests = digests[order]
        self._rows = np.concatenate([self._rows, rows])[order]
        self._truncated = np.concatenate([self._truncated, truncated])[order]
        self._fresh.clear()

    def close(self) -> None:
        os.close(self._index)
        os.close(self._vectors)


class _Flock:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
