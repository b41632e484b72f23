"""The lexicon's persisted term cache: what lets a restart skip re-running Kiwi.

It is derived state (architecture invariant 2): the index as of one ``(epoch, seq)`` of the
graph's change feed, plus each document's text digest so a later re-snapshot re-tokenizes only
the documents whose text changed. It lives under ``KEYMEM_HOME/lexicon/``, never in the graph's
database. Anything wrong with it (missing, truncated, corrupt, another format or tokenizer
version, parts that disagree) makes ``load`` raise ``CacheInvalid``; the service then discards
it and rebuilds from the graph. Writes go to a temporary file that replaces the old one
atomically. Saving is split: the serving thread only captures references (``snapshot``), and
the arrays are built and written on another thread (``write``).

Every part is a flat little-endian array at an aligned offset, so ``load`` maps the file and
hands the index views of it: nothing is decoded or copied per document or per term, the
pages are the page cache's (shared with the next worker forked after a crash, and dropped
by the kernel under pressure rather than swapped), and a restart costs the checksum and the
consistency checks. A replaced file stays mapped until its arrays are dropped (unlinked
inodes live on while mapped).

Layout: ``MAGIC``, a 32-byte SHA-256 of everything after it, the header's length (u64), the
msgpack header, then the sections, each at a multiple of ``ALIGN_BYTES`` from the first::

    {"format": 3, "tokenizer": str, "epoch": str, "seq": int, "names": [str],
     "documents": {"ids": S<width>, "spaces": u1|u2|u4, "digests": V16},
     "namespaces": [{"vocab": [str], "ptr": i8, "tids": u2|i4, "tfs": u1|u2|i4,
                     "term_ptr": i8, "term_rows": i4, "term_tfs": u1|u2|i4}]}

where each array is ``[offset, dtype, count]``. The document table holds every document, ids
ascending; namespace ``k``'s rows are the table's rows with ``spaces == k``, in that order,
stored document-major (what a later save and a compaction start from) and term-major (the
postings queries read; a restart sorts nothing).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import msgpack
import numpy as np

from keymem.services.lexicon.index import (
    DIGEST_DTYPE,
    AnyIntArray,
    DocTable,
    FrozenNamespace,
    FrozenTable,
    LexiconIndex,
    NamespaceCsr,
    TermColumns,
)

CACHE_FORMAT = 3
MAGIC = b"KMLEXC\x00\x03"
CHECKSUM_BYTES = 32
HEAD_BYTES = len(MAGIC) + CHECKSUM_BYTES
ALIGN_BYTES = 64
CACHE_FILE = "terms.cache"
PARTIAL_SUFFIX = ".tmp"  # a save in progress: terms.cache.<pid>.tmp
_LENGTH = struct.Struct("<Q")
# dtypes a file may give each array (the writer picks the narrowest that holds the values)
_COUNTS = ("|u1", "<u2", "<i4")
_NAMESPACE_ARRAYS = {
    "ptr": ("<i8",),
    "tids": ("<u2", "<i4"),
    "tfs": _COUNTS,
    "term_ptr": ("<i8",),
    "term_rows": ("<i4",),
    "term_tfs": _COUNTS,
}
_SPACE_CODES = ("|u1", "<u2", "<u4")


class CacheInvalid(Exception):
    """The cache cannot be used; rebuild from the graph."""


@dataclass(frozen=True, slots=True)
class CacheInfo:
    epoch: str
    seq: int
    documents: int
    bytes: int


def cache_path(home: Path) -> Path:
    return home / "lexicon" / CACHE_FILE


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a save writes, captured on the serving thread; ``write`` may run on another."""

    table: FrozenTable
    namespaces: dict[str, FrozenNamespace]
    tokenizer: str
    epoch: str
    seq: int


def snapshot(index: LexiconIndex, *, tokenizer: str, epoch: str, seq: int) -> Snapshot:
    spaces = {name: space.freeze() for name, space in index.namespaces.items()}
    return Snapshot(index.frozen_table(), spaces, tokenizer, epoch, seq)


def _narrowest(values: AnyIntArray, choices: tuple[str, ...]) -> np.ndarray[Any, Any]:
    top = int(values.max()) if len(values) else 0
    for dtype in choices:
        if top <= np.iinfo(np.dtype(dtype)).max:
            return values.astype(dtype, copy=False)
    raise ValueError(f"value {top} too large for {choices}")


def _arrays(snap: Snapshot) -> tuple[DocTable, list[tuple[list[str], dict[str, Any]]]]:
    """The document table and, per namespace in its order, the vocabulary and arrays."""
    table = snap.table.to_table()
    spaces = []
    for code, name in enumerate(table.names):
        frozen = snap.namespaces[name]
        wide = frozen.to_csr()
        if not np.array_equal(wide.ids, table.ids[table.spaces == code]):
            raise ValueError(f"namespace {name!r} changed while its snapshot was taken")
        tids_dtype = "<u2" if len(wide.vocab) <= np.iinfo(np.uint16).max + 1 else "<i4"
        # narrowed before the term-major sort, which then copies the narrow counts: the wide
        # arrays are dropped early, as they are most of a save's peak memory at 1M documents
        csr = replace(
            wide,
            tids=wide.tids.astype(tids_dtype, copy=False),
            tfs=_narrowest(wide.tfs, _COUNTS),
        )
        del wide
        # to_csr kept the base's rows and term ids when nothing changed: so do its columns
        columns = frozen.columns
        if columns is None or len(columns.ptr) != len(csr.vocab) + 1:
            columns = TermColumns.of(csr)
        arrays = {
            "ptr": csr.ptr.astype("<i8", copy=False),
            "tids": csr.tids,
            "tfs": csr.tfs,
            "term_ptr": columns.ptr.astype("<i8", copy=False),
            "term_rows": columns.rows.astype("<i4", copy=False),
            "term_tfs": _narrowest(columns.tfs, _COUNTS),
        }
        spaces.append((csr.vocab, arrays))
    return table, spaces


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN_BYTES) * ALIGN_BYTES


class _Layout:
    """Offsets of the sections, relative to the first, in the order they are written."""

    def __init__(self) -> None:
        self.arrays: list[np.ndarray[Any, Any]] = []
        self.end = 0

    def place(self, array: np.ndarray[Any, Any]) -> list[Any]:
        array = np.ascontiguousarray(array)
        offset = _aligned(self.end)
        self.arrays.append(array)
        self.end = offset + array.nbytes
        return [offset, array.dtype.str, len(array)]

    def chunks(self) -> Iterator[bytes | memoryview]:
        at = 0
        for array in self.arrays:
            offset = _aligned(at)
            yield b"\x00" * (offset - at)
            yield array.view(np.uint8).data
            at = offset + array.nbytes


def write(path: Path, snap: Snapshot) -> CacheInfo:
    table, spaces = _arrays(snap)
    layout = _Layout()
    header = {
        "format": CACHE_FORMAT,
        "tokenizer": snap.tokenizer,
        "epoch": snap.epoch,
        "seq": snap.seq,
        "names": table.names,
        "documents": {
            "ids": layout.place(table.ids),
            "spaces": layout.place(_narrowest(table.spaces, _SPACE_CODES)),
            "digests": layout.place(table.digests),
        },
        "namespaces": [
            {"vocab": vocab, **{key: layout.place(array) for key, array in arrays.items()}}
            for vocab, arrays in spaces
        ],
    }
    packed: bytes = msgpack.packb(header, use_bin_type=True)
    lead = _LENGTH.pack(len(packed)) + packed
    lead += b"\x00" * (_aligned(HEAD_BYTES + len(lead)) - HEAD_BYTES - len(lead))
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_partial(path)
    tmp = _partial(path)
    with open(tmp, "wb") as out:
        size = _write_checksummed(out, [lead, *layout.chunks()])
        os.fsync(out.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a machine crash
    finally:
        os.close(directory)
    return CacheInfo(snap.epoch, snap.seq, len(table.ids), size)


def _partial(path: Path) -> Path:
    return path.with_name(f"{path.name}.{os.getpid()}{PARTIAL_SUFFIX}")


def remove_partial(path: Path) -> None:
    """Delete what a process killed mid-save left beside ``path`` (a stop timeout's SIGKILL
    during a save): never read as a cache, but as large as one. Run at every start and save."""
    for stale in path.parent.glob(f"{path.name}.*{PARTIAL_SUFFIX}"):
        stale.unlink(missing_ok=True)


def _write_checksummed(out: IO[bytes], chunks: list[bytes | memoryview]) -> int:
    digest = hashlib.sha256()
    out.write(MAGIC + b"\x00" * CHECKSUM_BYTES)
    for chunk in chunks:
        digest.update(chunk)
        out.write(chunk)
    size = out.tell()
    out.seek(len(MAGIC))
    out.write(digest.digest())
    out.flush()
    return size


def save(path: Path, index: LexiconIndex, *, tokenizer: str, epoch: str, seq: int) -> CacheInfo:
    return write(path, snapshot(index, tokenizer=tokenizer, epoch=epoch, seq=seq))


def _map(path: Path) -> mmap.mmap:
    try:
        with open(path, "rb") as file:
            if os.fstat(file.fileno()).st_size <= HEAD_BYTES + _LENGTH.size:
                raise CacheInvalid("not a lexicon cache (too short)")
            return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError as exc:
        raise CacheInvalid("no cache yet") from exc
    except OSError as exc:
        raise CacheInvalid(f"cannot read the cache: {exc}") from exc


def load(path: Path, index: LexiconIndex, *, tokenizer: str) -> CacheInfo:
    """Fill the empty ``index`` from the cache at ``path``; ``CacheInvalid`` if unusable."""
    mapped = _map(path)
    if mapped[: len(MAGIC)] != MAGIC:
        raise CacheInvalid(f"not a lexicon cache of format {CACHE_FORMAT}")
    if hashlib.sha256(memoryview(mapped)[HEAD_BYTES:]).digest() != mapped[len(MAGIC) : HEAD_BYTES]:
        raise CacheInvalid("checksum mismatch (truncated or corrupt)")
    try:
        (length,) = _LENGTH.unpack_from(mapped, HEAD_BYTES)
        start = HEAD_BYTES + _LENGTH.size
        header = msgpack.unpackb(mapped[start : start + length], raw=False)
        if header["format"] != CACHE_FORMAT:
            raise CacheInvalid(f"cache format {header['format']}, expected {CACHE_FORMAT}")
        if header["tokenizer"] != tokenizer:
            raise CacheInvalid(f"made by tokenizer {header['tokenizer']!r}, now {tokenizer!r}")
        first = _aligned(start + length)

        def array(spec: list[Any], allowed: tuple[str, ...]) -> np.ndarray[Any, Any]:
            offset, dtype, count = spec
            if dtype not in allowed:
                raise CacheInvalid(f"an array of type {dtype!r}, expected one of {allowed}")
            return np.frombuffer(mapped, dtype=dtype, count=count, offset=first + offset)

        docs = header["documents"]
        width = np.dtype(str(docs["ids"][1])).itemsize
        table = DocTable(
            ids=array(docs["ids"], (f"|S{width}",)),
            spaces=array(docs["spaces"], _SPACE_CODES),
            digests=array(docs["digests"], (DIGEST_DTYPE.str,)),
            names=[str(name) for name in header["names"]],
        )
        if len(header["namespaces"]) != len(table.names):
            raise CacheInvalid("namespace list does not match the names")
        spaces = {}
        for code, (name, space) in enumerate(zip(table.names, header["namespaces"], strict=True)):
            parts = {key: array(space[key], allowed) for key, allowed in _NAMESPACE_ARRAYS.items()}
            csr = NamespaceCsr(
                ids=table.ids[table.spaces == code],
                vocab=[str(term) for term in space["vocab"]],
                ptr=parts["ptr"],
                tids=parts["tids"],
                tfs=parts["tfs"],
            )
            columns = TermColumns(parts["term_ptr"], parts["term_rows"], parts["term_tfs"])
            spaces[name] = (csr, columns)
        index.load(table, spaces)
        # the checks read every page; a query reads few of them again: out of this process's
        # resident set until touched (they stay in the page cache, shared and reclaimable)
        mapped.madvise(mmap.MADV_DONTNEED)
        return CacheInfo(str(header["epoch"]), int(header["seq"]), len(index), len(mapped))
    except CacheInvalid:
        index.clear()
        raise
    except Exception as exc:  # any shape error in a checksummed file: still never crash
        index.clear()
        raise CacheInvalid(f"cache content unusable: {type(exc).__name__}: {exc}") from exc
