"""Passage vectors kept on disk, so a restart does not make every pool cold again.

A passage's vector is a pure function of its text and the embedding model's fingerprint, so
it is stored by a digest of the text in a directory named after the fingerprint: another model
never reads it. Rows are read with ``pread``, not memory-mapped: a pool's hundred rows cost a
hundred small reads, and a file of a million rows adds nothing to the process's resident
memory (the page cache holds what is read). The digests live in memory as sorted arrays (24
bytes a row).

Which rows are dead (a memory corrected or forgotten) nobody knows cheaply: the reranker sees
only texts. So the store keeps what is read and lets the rest go, in two generations. Each is
two append-only files, ``index.<n>`` (one ``INDEX_RECORD`` per vector: the text's digest and
whether the model cut the text) and ``vectors.<n>`` (float16 rows, the same order), ``n`` the
second it started. New vectors go to the newer (current) generation; a row found only in the
previous one is copied forward, one append, as an embedded miss costs. Once the current
generation holds as many rows as the previous one (and at least ``min_rows``, the size of the
LRU in front of the store), or is ``GENERATION_MAX_AGE_S`` old, it becomes the previous and the
previous is deleted: a row read in neither generation is gone, and costs one embedding if it
is ever scored again. Disk stays within about twice the largest generation, which is the rows
read (or written) in one.

Every change to the directory takes an exclusive ``flock`` on its ``lock`` file, so several
processes (reranker workers of one home) share it: a rotation made by one is followed by the
others before their next append, so all of them write to the newest generation; each sees the
others' rows at its next start or rotation. A crash between the two appends leaves vectors
without digests: the next append, or the next start, cuts both files back to the rows they
share. A crash inside a rotation leaves a third generation or half of one: the next start
keeps the newest two. Nothing here is ever needed for correctness: any failure to read or
write leaves the scorer embedding as it would without the store. Like the LRU in front of it,
one store is used from its worker's serving thread only.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import time
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
# A generation older than this ends even if small: what lets a store whose memories were
# mostly forgotten shrink (its rows read stay few; nothing else would end the generation).
GENERATION_MAX_AGE_S = 30 * 86_400
INDEX_PREFIX, VECTORS_PREFIX = "index.", "vectors."
LOCK_NAME = "lock"
# The files of a store written before generations: taken over as the oldest generation.
UNNUMBERED = ("vectors", "index")


def digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=DIGEST_BYTES).digest()


def store_dir(root: Path, fingerprint: str) -> Path:
    """The directory of one model's vectors: its fingerprint in characters a path allows, and a
    digest of it whole, so two fingerprints never share one."""
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", fingerprint)
    return root / f"{readable}-{hashlib.blake2b(fingerprint.encode(), digest_size=4).hexdigest()}"


def generations(directory: Path) -> list[int]:
    """The generations whose index is on disk, oldest first."""
    return sorted(
        int(name[len(INDEX_PREFIX) :])
        for name in os.listdir(directory)
        if name.startswith(INDEX_PREFIX) and name[len(INDEX_PREFIX) :].isdigit()
    )


class _Generation:
    """One generation's two files and its digests: sorted, and a dict of recent appends."""

    def __init__(self, directory: Path, number: int, row_bytes: int) -> None:
        """Open (or create) the files and read the index (call under the directory's lock)."""
        self.number, self.row_bytes = number, row_bytes
        self.paths = (
            directory / f"{INDEX_PREFIX}{number}",
            directory / f"{VECTORS_PREFIX}{number}",
        )
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND
        self.index = os.open(self.paths[0], flags, 0o600)
        try:
            self.vectors = os.open(self.paths[1], flags, 0o600)
        except OSError:
            os.close(self.index)
            raise
        self.fresh: dict[bytes, tuple[int, bool]] = {}
        records = np.fromfile(self.paths[0], dtype=INDEX_RECORD, count=self.aligned_rows())
        order = np.argsort(records["digest"], kind="stable")
        self.digests = records["digest"][order]
        self.rows = order.astype(np.int64)
        self.truncated = records["truncated"][order].astype(bool)

    def __len__(self) -> int:
        return len(self.digests) + len(self.fresh)

    def rows_on_disk(self) -> int:
        """Rows both files hold whole."""
        return min(
            os.fstat(self.index).st_size // INDEX_RECORD.itemsize,
            os.fstat(self.vectors).st_size // self.row_bytes,
        )

    def aligned_rows(self) -> int:
        """``rows_on_disk``, the files cut back to them (call under the lock)."""
        rows = self.rows_on_disk()
        os.ftruncate(self.index, rows * INDEX_RECORD.itemsize)
        os.ftruncate(self.vectors, rows * self.row_bytes)
        return rows

    def find(self, key: bytes) -> tuple[int, bool] | None:
        """The row of a digest and whether its text was cut."""
        fresh = self.fresh.get(key)
        if fresh is not None:
            return fresh
        at = int(np.searchsorted(self.digests, key))
        # numpy reads an S16 element without its trailing zero bytes
        if at < len(self.digests) and self.digests[at] == key.rstrip(b"\0"):
            return int(self.rows[at]), bool(self.truncated[at])
        return None

    def get(self, key: bytes) -> Cached | None:
        where = self.find(key)
        if where is None:
            return None
        row, truncated = where
        raw = os.pread(self.vectors, self.row_bytes, row * self.row_bytes)
        if len(raw) != self.row_bytes:  # the file was cut short outside keymem: embed again
            return None
        return Cached(np.frombuffer(raw, dtype=VECTOR_DTYPE).astype(np.float32), truncated)

    def append(self, new: dict[bytes, Cached]) -> int:
        """Append the rows (call under the lock); the rows the generation now holds."""
        records = np.empty(len(new), dtype=INDEX_RECORD)
        records["digest"] = list(new)
        records["truncated"] = [entry.truncated for entry in new.values()]
        vectors = np.stack([entry.vector for entry in new.values()]).astype(VECTOR_DTYPE)
        first = self.aligned_rows()
        os.write(self.vectors, vectors.tobytes())
        os.write(self.index, records.tobytes())
        for i, (key, entry) in enumerate(new.items()):
            self.fresh[key] = (first + i, entry.truncated)
        if len(self.fresh) >= max(MERGE_MIN_ROWS, len(self.digests) // MERGE_SHARE):
            self._merge()
        return first + len(new)

    def _merge(self) -> None:
        keys = np.array(list(self.fresh), dtype=f"S{DIGEST_BYTES}")
        rows = np.array([row for row, _ in self.fresh.values()], dtype=np.int64)
        truncated = np.array([t for _, t in self.fresh.values()], dtype=bool)
        digests = np.concatenate([self.digests, keys])
        order = np.argsort(digests, kind="stable")
        self.digests = digests[order]
        self.rows = np.concatenate([self.rows, rows])[order]
        self.truncated = np.concatenate([self.truncated, truncated])[order]
        self.fresh.clear()

    def close(self) -> None:
        os.close(self.index)
        os.close(self.vectors)


class PassageStore:
    """Persisted passage vectors of one embedding model (float16), keyed by text digest."""

    def __init__(self, directory: Path, dim: int, min_rows: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory, self.dim, self.min_rows = directory, dim, min_rows
        self.row_bytes = dim * VECTOR_DTYPE.itemsize
        self._lock = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        self.previous: _Generation | None = None
        self.current: _Generation | None = None
        try:
            with self._locked():
                self._follow()
                self._rotate_if_due()
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return sum(len(g) for g in self._open_generations())

    @property
    def generation(self) -> int:
        """The current generation's number: it changes when a generation ends."""
        assert self.current is not None
        return self.current.number

    def _open_generations(self) -> list[_Generation]:
        return [g for g in (self.previous, self.current) if g is not None]

    def _locked(self) -> _Flock:
        return _Flock(self._lock)

    def _on_disk(self) -> list[int]:
        """The newest two generations (a fresh one if none), the files of any other deleted:
        an older one a crash in a rotation left, or a half-made one (call under the lock)."""
        unnumbered = [self.directory / name for name in UNNUMBERED]
        if unnumbered[1].exists() and not generations(self.directory):
            for path in unnumbered:  # the index last: while it is there, this is still to do
                if path.exists():
                    os.replace(path, self.directory / f"{path.name}.0")
        numbers = generations(self.directory)[-2:] or [int(time.time())]
        for name in os.listdir(self.directory):
            prefix, _, number = name.rpartition(".")
            numbered = f"{prefix}." in (INDEX_PREFIX, VECTORS_PREFIX) and number.isdigit()
            if numbered and int(number) not in numbers:
                os.unlink(self.directory / name)
        return numbers

    def _follow(self) -> None:
        """Take up the generations on disk (another worker may have rotated since), keeping
        the ones already open (call under the lock)."""
        numbers = self._on_disk()
        mine = {g.number: g for g in self._open_generations()}
        if list(mine) == numbers:
            return
        self.previous = self.current = None
        opened: list[_Generation] = []
        try:
            for number in numbers:
                kept = mine.pop(number, None)
                opened.append(kept or _Generation(self.directory, number, self.row_bytes))
        except BaseException:
            mine.update((g.number, g) for g in opened)
            raise
        finally:
            for generation in mine.values():
                generation.close()
        self.previous = opened[0] if len(opened) == 2 else None
        self.current = opened[-1]

    def _rotate_if_due(self) -> None:
        """End the current generation when due (call under the lock): see the module's doc."""
        current = self.current
        assert current is not None
        rows = current.rows_on_disk()
        previous_rows = self.previous.rows_on_disk() if self.previous is not None else 0
        aged = time.time() - current.number >= GENERATION_MAX_AGE_S
        if rows == 0 or (rows < max(previous_rows, self.min_rows) and not aged):
            return
        fresh = _Generation(
            self.directory, max(current.number + 1, int(time.time())), self.row_bytes
        )
        if self.previous is not None:
            for path in self.previous.paths:  # the index first: without it the rest is litter
                path.unlink(missing_ok=True)
            self.previous.close()
        self.previous, self.current = current, fresh
        log.info(
            "passage vectors: generation %d ended at %d rows; the one before (%d rows) deleted",
            current.number,
            rows,
            previous_rows,
        )

    def get_many(self, texts: Iterable[str]) -> dict[str, Cached]:
        """The stored vector of each text that has one (as float32); one found only in the
        previous generation is copied into the current one."""
        assert self.current is not None
        found: dict[str, Cached] = {}
        forward: dict[bytes, Cached] = {}
        for text in texts:
            key = digest(text)
            entry = self.current.get(key)
            if entry is None and self.previous is not None:
                entry = self.previous.get(key)
                if entry is not None:
                    forward[key] = entry
            if entry is not None:
                found[text] = entry
        self._append(forward)
        return found

    def add(self, entries: dict[str, Cached]) -> None:
        """Append the vectors (as float16) of the texts the current generation lacks."""
        assert self.current is not None
        new = {digest(text): entry for text, entry in entries.items()}
        self._append({key: entry for key, entry in new.items() if self.current.find(key) is None})

    def _append(self, new: dict[bytes, Cached]) -> None:
        if not new:
            return
        with self._locked():
            self._follow()
            assert self.current is not None
            self.current.append(new)
            self._rotate_if_due()

    def close(self) -> None:
        """Let go of every file; a second close does nothing (a descriptor number closed twice
        could by then be someone else's)."""
        if self._lock < 0:
            return
        for generation in self._open_generations():
            generation.close()
        self.previous = self.current = None
        os.close(self._lock)
        self._lock = -1


class _Flock:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
