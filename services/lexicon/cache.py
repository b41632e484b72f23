"""The lexicon's persisted term cache: what lets a restart skip re-running Kiwi.

It is derived state (architecture invariant 2): the index as of one ``(epoch, seq)`` of the
graph's change feed, per namespace in the compressed-row form the index loads in vectorised
passes, plus each document's text digest so a later re-snapshot re-tokenizes only the
documents whose text changed. It lives under ``KEYMEM_HOME/lexicon/``, never in the graph's
database. Anything wrong with it (missing, truncated, corrupt, another format or tokenizer
version) makes ``load`` raise ``CacheInvalid``; the service then discards it and rebuilds
from the graph. Writes go to a temporary file that replaces the old one atomically. Saving is
split: the serving thread only captures references (``snapshot``), and the arrays are built
and written on another thread (``write``).

Each namespace is stored twice over, document-major (the rows a later save and a compaction
start from) and term-major (the postings queries read): a restart installs both as flat arrays
and sorts nothing; each term's postings become objects when a query or write first touches it.

Layout: ``MAGIC``, a 32-byte BLAKE2b digest of the payload, then the msgpack payload::

    {"format": 2, "tokenizer": str, "epoch": str, "seq": int,
     "namespaces": [{"name", "ids", "digests", "vocab", "ptr": <i8 bytes,
                     "tids": <i4 bytes, "tfs": <i4 bytes,
                     "term_ptr": <i8 bytes, "term_rows": <i4 bytes, "term_tfs": <i4 bytes}]}
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from keymem.services.lexicon.index import (
    FrozenNamespace,
    LexiconIndex,
    NamespaceCsr,
    TermColumns,
)

CACHE_FORMAT = 2
MAGIC = b"KMLEXC\x00\x01"
CHECKSUM_BYTES = 32
CACHE_FILE = "terms.cache"


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


def _checksum(payload: bytes | memoryview) -> bytes:
    return hashlib.blake2b(payload, digest_size=CHECKSUM_BYTES).digest()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a save writes, captured on the serving thread; ``write`` may run on another."""

    namespaces: list[tuple[str, FrozenNamespace, list[bytes]]]
    tokenizer: str
    epoch: str
    seq: int

    @property
    def documents(self) -> int:
        return sum(len(frozen.ids) for _, frozen, _ in self.namespaces)


def snapshot(index: LexiconIndex, *, tokenizer: str, epoch: str, seq: int) -> Snapshot:
    spaces = []
    for name, space in index.namespaces.items():
        frozen = space.freeze()
        spaces.append((name, frozen, list(map(index.digest_of.__getitem__, frozen.ids))))
    return Snapshot(spaces, tokenizer, epoch, seq)


def write(path: Path, snap: Snapshot) -> CacheInfo:
    spaces: list[dict[str, Any]] = []
    for name, frozen, digests in snap.namespaces:
        csr = frozen.to_csr()
        columns = TermColumns.of(csr)
        spaces.append(
            {
                "name": name,
                "ids": csr.ids,
                "digests": digests,
                "vocab": csr.vocab,
                "ptr": csr.ptr.astype("<i8").tobytes(),
                "tids": csr.tids.astype("<i4").tobytes(),
                "tfs": csr.tfs.astype("<i4").tobytes(),
                "term_ptr": columns.ptr.astype("<i8").tobytes(),
                "term_rows": columns.rows.astype("<i4").tobytes(),
                "term_tfs": columns.tfs.astype("<i4").tobytes(),
            }
        )
    payload: bytes = msgpack.packb(
        {
            "format": CACHE_FORMAT,
            "tokenizer": snap.tokenizer,
            "epoch": snap.epoch,
            "seq": snap.seq,
            "namespaces": spaces,
        },
        use_bin_type=True,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f"{path.name}.*.tmp"):  # left by a process killed mid-write
        stale.unlink(missing_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as out:
        out.write(MAGIC)
        out.write(_checksum(payload))
        out.write(payload)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    return CacheInfo(
        snap.epoch, snap.seq, snap.documents, len(MAGIC) + CHECKSUM_BYTES + len(payload)
    )


def save(path: Path, index: LexiconIndex, *, tokenizer: str, epoch: str, seq: int) -> CacheInfo:
    return write(path, snapshot(index, tokenizer=tokenizer, epoch=epoch, seq=seq))


def load(path: Path, index: LexiconIndex, *, tokenizer: str) -> CacheInfo:
    """Fill the empty ``index`` from the cache at ``path``; ``CacheInvalid`` if unusable."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise CacheInvalid("no cache yet") from exc
    except OSError as exc:
        raise CacheInvalid(f"cannot read the cache: {exc}") from exc
    head = len(MAGIC) + CHECKSUM_BYTES
    if len(raw) < head or not raw.startswith(MAGIC):
        raise CacheInvalid("not a lexicon cache of this format")
    payload = memoryview(raw)[head:]
    if _checksum(payload) != raw[len(MAGIC) : head]:
        raise CacheInvalid("checksum mismatch (truncated or corrupt)")
    try:
        body = msgpack.unpackb(payload, raw=False)
        if body["format"] != CACHE_FORMAT:
            raise CacheInvalid(f"cache format {body['format']}, expected {CACHE_FORMAT}")
        if body["tokenizer"] != tokenizer:
            raise CacheInvalid(f"made by tokenizer {body['tokenizer']!r}, now {tokenizer!r}")
        for space in body["namespaces"]:
            csr = NamespaceCsr(
                ids=space["ids"],
                vocab=space["vocab"],
                ptr=np.frombuffer(space["ptr"], dtype="<i8").astype(np.int64),
                tids=np.frombuffer(space["tids"], dtype="<i4").astype(np.int32),
                tfs=np.frombuffer(space["tfs"], dtype="<i4").astype(np.int32),
            )
            columns = TermColumns(
                ptr=np.frombuffer(space["term_ptr"], dtype="<i8").astype(np.int64),
                rows=np.frombuffer(space["term_rows"], dtype="<i4").astype(np.int32),
                tfs=np.frombuffer(space["term_tfs"], dtype="<i4").astype(np.int32),
            )
            index.load_namespace(str(space["name"]), csr, space["digests"], columns)
        return CacheInfo(str(body["epoch"]), int(body["seq"]), len(index), len(raw))
    except CacheInvalid:
        index.clear()
        raise
    except Exception as exc:  # any shape error in a checksummed file: still never crash
        index.clear()
        raise CacheInvalid(f"cache content unusable: {type(exc).__name__}: {exc}") from exc
