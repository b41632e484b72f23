"""A first snapshot gathered in flat arrays and installed in the empty index in one load.

Indexing a large store document by document leaves every document as Python objects beside
the arrays (a pending (slot, count) pair per posting, a bag and dict entries per document):
at 1M memories that was a 1.9 GB worker whose queries merged long pending lists on first use.
When the index is empty (a first index, or a cache that could not be used) the feed's snapshot
is instead appended here as integer arrays (a vocabulary per namespace, term ids and counts
per document) and ``install`` hands the index the same bulk form a cache load gives it.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping

import numpy as np

from keymem.services.lexicon.index import (
    DIGEST_BYTES,
    DIGEST_DTYPE,
    AnyIntArray,
    DocTable,
    IdArray,
    LexiconIndex,
    NamespaceCsr,
    TermColumns,
    _gather_rows,
    ascending_ids,
    encode_ids,
)


class _Space:
    """One namespace's documents in arrival order: term ids and counts, terms per document."""

    __slots__ = ("rows", "sizes", "tfs", "tids", "vocab")

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.rows = array("q")  # the document's position in the builder
        self.sizes = array("q")
        self.tids = array("i")
        self.tfs = array("i")

    def add(self, row: int, counts: Mapping[str, int]) -> None:
        vocab = self.vocab
        self.rows.append(row)
        self.sizes.append(len(counts))
        for term, tf in counts.items():
            tid = vocab.get(term)
            if tid is None:
                tid = vocab[term] = len(vocab)
            self.tids.append(tid)
            self.tfs.append(tf)

    def csr(self, ids: IdArray) -> NamespaceCsr:
        """The namespace's rows in id order (``ids`` are every document's, by builder row)."""
        rows = np.frombuffer(self.rows, dtype=np.int64)
        ptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(np.frombuffer(self.sizes, dtype=np.int64), out=ptr[1:])
        tids: AnyIntArray = np.frombuffer(self.tids, dtype=np.int32)
        tfs: AnyIntArray = np.frombuffer(self.tfs, dtype=np.int32)
        own = ids[rows]
        if not ascending_ids(own):  # the feed pages by id: already in order, as a rule
            order = np.argsort(own, kind="stable")
            own = own[order]
            ptr, tids, tfs = _gather_rows(ptr, tids, tfs, order)
        # the cache's narrow types (u2 term ids, u1 counts) when the values fit
        tid_type = np.uint16 if len(self.vocab) <= np.iinfo(np.uint16).max else np.int32
        tf_type = np.min_scalar_type(int(tfs.max(initial=1)))
        return NamespaceCsr(
            ids=own,
            vocab=list(self.vocab),
            ptr=ptr,
            tids=tids.astype(tid_type),
            tfs=tfs.astype(tf_type),
        )


class BulkBuilder:
    """Documents appended as they come (ids unique); ``install`` loads them all at once."""

    def __init__(self) -> None:
        self._ids: list[str] = []
        self._digests = bytearray()
        self._spaces: dict[str, _Space] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, doc_id: str, namespace: str, digest: bytes, counts: Mapping[str, int]) -> None:
        if len(digest) != DIGEST_BYTES:
            raise ValueError(f"a text digest is {DIGEST_BYTES} bytes, not {len(digest)}")
        space = self._spaces.get(namespace)
        if space is None:
            space = self._spaces[namespace] = _Space()
        space.add(len(self._ids), counts)
        self._ids.append(doc_id)
        self._digests += digest

    def install(self, index: LexiconIndex) -> None:
        """Load every document into the empty ``index``; ``ValueError`` (the index unchanged)
        for a repeated id, an id with a NUL, or an index that is not empty."""
        if any("\x00" in doc_id for doc_id in self._ids):
            raise ValueError("a document id may not contain NUL")
        ids = encode_ids(self._ids)
        names = sorted(self._spaces)
        spaces = {name: self._spaces[name].csr(ids) for name in names}
        codes = np.zeros(len(ids), dtype=np.min_scalar_type(max(len(names) - 1, 0)))
        for code, name in enumerate(names):
            codes[np.frombuffer(self._spaces[name].rows, dtype=np.int64)] = code
        order = np.argsort(ids, kind="stable")
        table = DocTable(
            ids=ids[order],
            spaces=codes[order],
            digests=np.frombuffer(bytes(self._digests), DIGEST_DTYPE)[order],
            names=names,
        )
        index.load(table, {name: (csr, TermColumns.of(csr)) for name, csr in spaces.items()})
