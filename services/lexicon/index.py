"""BM25 Okapi over an incremental inverted index, one independent index per namespace.

Scores equal ``rank_bm25.BM25Okapi(corpus, k1=1.5, b=0.75, epsilon=0.25).get_scores(query)`` on
the namespace's documents (tests assert it to 1e-6), including its quirks: idf is
``ln(N - df + 0.5) - ln(df + 0.5)``; a negative idf is replaced by ``epsilon * average_idf``,
where the average is over the *raw* idf of every term in the corpus; a query term repeated
twice counts twice. In a namespace of one or two documents every idf is <= 0, so scores can be
zero or negative there; hits are the documents that contain a query term, ranked by score.

Why an inverted index: rank-bm25 walks every document of the corpus for every query term (a
Python list comprehension over ``doc_freqs``), so a query costs O(documents x query terms).
Here a query term touches only its postings, and the per-posting arithmetic is vectorised
with numpy, so the cost is O(postings of the query's terms).

Why per namespace: namespaces never leak into each other (architecture invariant 7), not even
through corpus statistics, and a namespace's scores are those of BM25 over that namespace.

Incremental without rebuilds: every stored version of a document gets a fresh *slot*. Adding
appends (slot, tf) to each term's pending list; removing marks the slot dead and only
decrements counts. A term's postings are merged into numpy arrays, and its dead entries
dropped, the next time a query reads it. When dead slots outnumber live ones the namespace is
renumbered from its live documents in one vectorised pass.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

K1 = 1.5
B = 0.75
EPSILON = 0.25
# Renumber a namespace's slots when its dead slots exceed both its live documents and this.
MIN_DEAD_SLOTS_TO_COMPACT = 4096
# A term's postings drop their dead entries when more than this share of them is dead.
MAX_DEAD_SHARE = 0.25
INITIAL_SLOTS = 64
RADIX_SORT_MAX_TERMS = 2**16 - 1
# Before scoring a term with at least this many postings, check whether pruning can skip it.
PRUNE_MIN_POSTINGS = 2048
# A pruned query looks a term up per kept document (a binary search) while that costs less
# than this many postings per document; else it spreads the term's whole list.
LOOKUP_COST_POSTINGS = 16
# Postings scored that outnumber 1 / SPREAD_SHARE of the slots are listed from the scores.
SPREAD_SHARE = 8
# Pruning keeps a document whose bound is this relative share below the n-th best score: its
# bound and its final score sum the same numbers in different orders (rounding).
BOUND_SLACK = 1e-9

IntArray = npt.NDArray[np.int32]
AnyIntArray = npt.NDArray[np.integer[Any]]
FloatArray = npt.NDArray[np.float64]
IdArray = npt.NDArray[np.bytes_]  # UTF-8 document ids, fixed width (numpy ``S``)
BoolArray = npt.NDArray[np.bool_]
# A document's length (its term count) per slot: float32 holds every integer below 2**24
# exactly, so the scores are those of float64 lengths, at half the memory (8 MB at 1M).
LENGTH_DTYPE = np.float32
LengthArray = npt.NDArray[np.float32]

_NO_SLOTS: IntArray = np.zeros(0, dtype=np.int32)
_NO_TFS: FloatArray = np.zeros(0, dtype=np.float64)
NO_IDS: IdArray = np.zeros(0, dtype="S1")
# A text digest (BLAKE2b) is this long; the cache stores digests as fixed-width records.
DIGEST_BYTES = 16
DIGEST_DTYPE = np.dtype(f"V{DIGEST_BYTES}")


def encode_ids(ids: Sequence[str]) -> IdArray:
    """Document ids as a fixed-width UTF-8 array (numpy ``S`` drops trailing NULs, so an id
    may not contain one: ``LexiconIndex.upsert`` refuses those)."""
    if not ids:
        return NO_IDS
    encoded: IdArray = np.array([doc_id.encode("utf-8") for doc_id in ids])
    return encoded


def ascending_ids(ids: IdArray) -> bool:
    """Whether ``ids`` is strictly ascending (sorted, no repeats): searchable by bisection."""
    return len(ids) < 2 or bool(np.all(ids[1:] > ids[:-1]))


def find_id(ids: IdArray, doc_id: str) -> int | None:
    """Where ``doc_id`` is in the ascending ``ids``, or None."""
    key = doc_id.encode("utf-8")
    if not len(ids) or len(key) > ids.dtype.itemsize:
        return None
    at = int(np.searchsorted(ids, key))
    return at if at < len(ids) and ids[at] == key else None


@dataclass(frozen=True, slots=True)
class _QueryTerm:
    weight: float  # idf x repeats in the query
    slots: IntArray
    saturation: FloatArray
    bound: float  # the most this term adds to any document's score


class _Postings:
    """One term's (slot, term frequency) entries: merged arrays plus a pending tail. The
    counts keep their narrow stored type (often u8, a view of the cache): only the saturation
    below is float64."""

    __slots__ = (
        "dead",
        "df",
        "pending_slots",
        "pending_tfs",
        "saturation",
        "saturation_avgdl",
        "saturation_max",
        "slots",
        "tfs",
    )

    def __init__(self, slots: IntArray = _NO_SLOTS, tfs: AnyIntArray = _NO_SLOTS) -> None:
        self.slots = slots
        self.tfs = tfs
        self.pending_slots: list[int] = []
        self.pending_tfs: list[int] = []
        self.df = len(slots)  # live entries
        self.dead = 0  # entries whose slot is dead
        # tf saturation per entry, valid for ``saturation_avgdl`` and the current arrays: read
        # often, it skips the gather and arithmetic until a write moves the average length.
        self.saturation: FloatArray | None = None
        self.saturation_avgdl = 0.0
        self.saturation_max = 0.0

    def add(self, slot: int, tf: int) -> None:
        self.pending_slots.append(slot)
        self.pending_tfs.append(tf)
        self.df += 1

    def arrays(self, alive: npt.NDArray[np.bool_]) -> tuple[IntArray, AnyIntArray]:
        if self.pending_slots:
            self.slots = np.concatenate(
                (self.slots, np.asarray(self.pending_slots, dtype=np.int32))
            )
            self.tfs = np.concatenate((self.tfs, np.asarray(self.pending_tfs, dtype=np.int32)))
            self.pending_slots = []
            self.pending_tfs = []
            self.saturation = None
        if self.dead and self.dead > MAX_DEAD_SHARE * len(self.slots):
            keep = alive[self.slots]
            self.slots = self.slots[keep]
            self.tfs = self.tfs[keep]
            self.dead = 0
            self.saturation = None
        return self.slots, self.tfs

    def saturations(
        self, alive: npt.NDArray[np.bool_], doc_len: LengthArray, avgdl: float
    ) -> tuple[IntArray, FloatArray, float]:
        """Slots (ascending), ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avgdl))`` per
        entry, and the largest of those (the term's bound, per unit of weight)."""
        slots, tfs = self.arrays(alive)
        if self.saturation is None or self.saturation_avgdl != avgdl:
            norm = (K1 * (1 - B)) + (K1 * B / avgdl) * doc_len[slots].astype(np.float64)
            self.saturation = tfs * (K1 + 1) / (tfs + norm)
            self.saturation_avgdl = avgdl
            self.saturation_max = float(self.saturation.max()) if len(slots) else 0.0
        return slots, self.saturation, self.saturation_max


@dataclass(frozen=True, slots=True)
class NamespaceCsr:
    """A namespace's live documents in compressed rows: what the cache stores and loads.

    Row ``i`` is document ``ids[i]`` (UTF-8, ascending, so an id is found by binary search);
    its terms are ``vocab[tids[ptr[i]:ptr[i + 1]]]`` with counts ``tfs[ptr[i]:ptr[i + 1]]``
    (each term once per row). ``tids`` and ``tfs`` may be any integer type that holds them.
    """

    ids: IdArray
    vocab: list[str]
    ptr: npt.NDArray[np.int64]
    tids: AnyIntArray
    tfs: AnyIntArray

    def validate(self) -> None:
        """Raise ``ValueError`` if the arrays do not describe ``len(ids)`` rows over ``vocab``."""
        rows = len(self.ids)
        if len(self.ptr) != rows + 1 or (rows and self.ptr[0] != 0):
            raise ValueError("row pointer does not match the document count")
        if int(self.ptr[-1]) != len(self.tids) or len(self.tids) != len(self.tfs):
            raise ValueError("row pointer does not match the term arrays")
        if rows and bool(np.any(np.diff(self.ptr) < 0)):
            raise ValueError("row pointer decreases")
        if len(self.tids) and (int(self.tids.min()) < 0 or int(self.tids.max()) >= len(self.vocab)):
            raise ValueError("term id outside the vocabulary")
        if len(self.tfs) and int(self.tfs.min()) < 1:
            raise ValueError("term frequency below 1")
        if not ascending_ids(self.ids):
            raise ValueError("document ids not ascending or not unique")


@dataclass(frozen=True, slots=True)
class TermColumns:
    """The same documents term-major: term ``t``'s postings are rows ``rows[ptr[t]:ptr[t + 1]]``
    (ascending) with counts ``tfs[...]``. The cache stores them so a restart needs no sort."""

    ptr: npt.NDArray[np.int64]
    rows: AnyIntArray
    tfs: AnyIntArray

    @classmethod
    def of(cls, csr: NamespaceCsr) -> TermColumns:
        rows = np.repeat(np.arange(len(csr.ids), dtype=np.int32), np.diff(csr.ptr))
        # a stable sort of 16-bit keys is a radix sort: ~4x faster than sorting int32 keys
        keys = (
            csr.tids.astype(np.uint16, copy=False)
            if len(csr.vocab) <= RADIX_SORT_MAX_TERMS
            else csr.tids
        )
        order = np.argsort(keys, kind="stable")
        ptr = np.zeros(len(csr.vocab) + 1, dtype=np.int64)
        np.cumsum(np.bincount(csr.tids, minlength=len(csr.vocab)), out=ptr[1:])
        return cls(ptr=ptr, rows=rows[order], tfs=csr.tfs[order])

    def validate(self, csr: NamespaceCsr) -> None:
        """Raise ``ValueError`` unless these columns can be ``csr`` read term-major: one row
        pointer per term, each term's document count and the counts' total as in ``csr``,
        rows in range and ascending within each term."""
        if len(self.ptr) != len(csr.vocab) + 1 or (len(self.ptr) and self.ptr[0] != 0):
            raise ValueError("term pointer does not match the vocabulary")
        if len(self.rows) != len(csr.tids) or len(self.tfs) != len(csr.tids):
            raise ValueError("term columns do not match the document rows")
        if not np.array_equal(np.diff(self.ptr), np.bincount(csr.tids, minlength=len(csr.vocab))):
            raise ValueError("term document counts do not match the document rows")
        if int(self.tfs.sum()) != int(csr.tfs.sum()):
            raise ValueError("term counts do not match the document rows")
        if len(self.rows) and (int(self.rows.min()) < 0 or int(self.rows.max()) >= len(csr.ids)):
            raise ValueError("posting row outside the documents")
        falls = np.flatnonzero(np.diff(self.rows) <= 0) + 1
        if not np.isin(falls, self.ptr).all():
            raise ValueError("postings not ascending within a term")


class _PostingsTable:
    """Per term id its ``_Postings`` (None once no live document has the term), made on first
    use from term-major arrays: a restart builds no per-term objects up front."""

    __slots__ = ("_base", "_made", "_size")

    def __init__(self, base: TermColumns | None = None) -> None:
        self._base = base
        self._made: dict[int, _Postings | None] = {}
        self._size = 0 if base is None else len(base.ptr) - 1

    def __len__(self) -> int:
        return self._size

    @property
    def columns(self) -> TermColumns | None:
        """The term-major arrays of the last bulk load (None before any)."""
        return self._base

    def append(self, postings: _Postings | None) -> None:
        self._made[self._size] = postings
        self._size += 1

    def __setitem__(self, tid: int, postings: _Postings | None) -> None:
        self._made[tid] = postings

    def __getitem__(self, tid: int) -> _Postings | None:
        try:
            return self._made[tid]
        except KeyError:
            pass
        assert self._base is not None  # ids past the base were appended, so made
        start, end = self._base.ptr[tid : tid + 2].tolist()
        postings = (
            _Postings(
                self._base.rows[start:end].astype(np.int32, copy=False),
                self._base.tfs[start:end],
            )
            if end > start
            else None
        )
        self._made[tid] = postings
        return postings


@dataclass(frozen=True, slots=True)
class FrozenNamespace:
    """A namespace's live documents at one moment: the rows of its last bulk load (never
    mutated) with which of them are still alive, and the bags of the documents added since
    (never mutated either). Cheap to take; ``to_csr`` may run on another thread."""

    base: NamespaceCsr
    base_alive: BoolArray
    added_ids: list[str]
    added_bags: list[IntArray]  # per document: row 0 term ids, row 1 counts
    terms: list[str]
    # the base's term-major arrays when the namespace is exactly its last bulk load (no write
    # since): a save right after a first index then sorts nothing
    columns: TermColumns | None = None

    def to_csr(self) -> NamespaceCsr:
        """The live documents in id order over a vocabulary of their terms only."""
        base = self.base
        keep = np.flatnonzero(self.base_alive)
        if len(keep) == len(base.ids):
            ids, ptr, tids, tfs = base.ids, base.ptr, base.tids, base.tfs
        else:
            ids = base.ids[keep]
            ptr, tids, tfs = _gather_rows(base.ptr, base.tids, base.tfs, keep)
        if self.added_ids:
            sizes = np.fromiter((bag.shape[1] for bag in self.added_bags), np.int64)
            pairs = np.concatenate(self.added_bags, axis=1)
            ids = np.concatenate((ids, encode_ids(self.added_ids)))
            ptr = np.concatenate((ptr, ptr[-1] + np.cumsum(sizes)))
            # in the narrowest type that holds both parts (the cache's are often u2 / u1)
            tid_type = np.promote_types(tids.dtype, np.min_scalar_type(max(len(self.terms) - 1, 0)))
            tf_type = np.promote_types(tfs.dtype, np.min_scalar_type(int(pairs[1].max(initial=1))))
            tids = np.concatenate((tids, pairs[0].astype(tid_type)))
            tfs = np.concatenate((tfs, pairs[1].astype(tf_type)))
            order = np.argsort(ids, kind="stable")
            ids = ids[order]
            ptr, tids, tfs = _gather_rows(ptr, tids, tfs, order)
        used = np.bincount(tids, minlength=len(self.terms)) > 0
        # the vocabulary is picked in C: a save runs beside the serving thread, and a Python
        # loop over a namespace's terms held the GIL for as long as it ran
        if used.all():  # the term ids are dense already: no copy of them
            vocab = list(self.terms)
        else:
            tids = (np.cumsum(used) - 1).astype(np.int32)[tids]
            vocab = list(itertools.compress(self.terms, used.tolist()))
        return NamespaceCsr(
            ids=ids,
            vocab=vocab,
            ptr=ptr,
            tids=tids,
            tfs=tfs,
        )


def _gather_rows(
    ptr: npt.NDArray[np.int64], tids: AnyIntArray, tfs: AnyIntArray, rows: npt.NDArray[np.intp]
) -> tuple[npt.NDArray[np.int64], AnyIntArray, AnyIntArray]:
    """Compressed rows ``rows`` (in that order) of the rows ``ptr``/``tids``/``tfs``."""
    starts = ptr[rows]
    sizes = ptr[rows + 1] - starts
    new_ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(sizes, out=new_ptr[1:])
    # int32 positions when they fit: at 1M documents (30M entries) this index array is the
    # largest temporary of a cache save, 120 instead of 240 MB, and it is built in place
    index_type = np.int32 if len(tids) <= np.iinfo(np.int32).max else np.int64
    entries = np.repeat((starts - new_ptr[:-1]).astype(index_type), sizes)
    entries += np.arange(new_ptr[-1], dtype=index_type)
    return new_ptr, tids[entries], tfs[entries]


def _nth_best(values: FloatArray, n: int) -> float:
    """The ``n``-th largest of ``values`` (at least ``n`` of them)."""
    return float(np.partition(values, len(values) - n)[len(values) - n])


def _scored_slots(scores: FloatArray, scored: list[IntArray], alive: BoolArray) -> IntArray:
    """The live documents of the ``scored`` postings (their ``scores`` are > 0)."""
    if len(scored) == 1:
        slots = scored[0]
    elif sum(len(postings) for postings in scored) * SPREAD_SHARE < len(scores):
        slots = np.unique(np.concatenate(scored))
    else:  # most of the namespace: reading the scores beats sorting the lists
        slots = np.flatnonzero(scores).astype(np.int32)
    live: IntArray = slots[alive[slots]]
    return live


def _row_sums(ptr: npt.NDArray[np.int64], values: AnyIntArray) -> FloatArray:
    sums = np.zeros(len(ptr) - 1, dtype=np.float64)
    filled = np.flatnonzero(np.diff(ptr))
    if len(filled):
        sums[filled] = np.add.reduceat(values, ptr[filled], dtype=np.int64)
    return sums


_NO_ROWS = NamespaceCsr(
    ids=NO_IDS, vocab=[], ptr=np.zeros(1, dtype=np.int64), tids=_NO_SLOTS, tfs=_NO_SLOTS
)


class NamespaceIndex:
    """BM25 over one namespace's documents.

    Slots below ``base_slots`` are the documents of the last bulk load (the cache, or a
    compaction): their ids (ascending, found by bisection) and term bags stay in ``base``'s
    arrays, so a restart builds no object per document. Later slots hold the documents
    written since, found through ``added_slot_of``.
    """

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.terms: list[str] = []
        self.postings = _PostingsTable()
        self.base = _NO_ROWS
        self.added_ids: list[str | None] = []  # slot base_slots + i; None once removed
        self.added_slot_of: dict[str, int] = {}
        self.bags: dict[int, IntArray] = {}  # an added live slot's term ids (row 0), counts
        self.doc_len: LengthArray = np.zeros(INITIAL_SLOTS, dtype=LENGTH_DTYPE)
        self.alive: BoolArray = np.zeros(INITIAL_SLOTS, dtype=np.bool_)
        self.n_docs = 0
        self.total_len = 0
        self.df_hist: dict[int, int] = {}  # document frequency -> how many terms have it
        self._average_idf: float | None = None

    # -- documents -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.n_docs

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and self.slot(doc_id) is not None

    @property
    def base_slots(self) -> int:
        return len(self.base.ids)

    @property
    def slot_count(self) -> int:
        """Slots in use, dead ones included (what a query's score arrays span)."""
        return self.base_slots + len(self.added_ids)

    def slot(self, doc_id: str) -> int | None:
        """The live slot of ``doc_id``, or None."""
        slot = self.added_slot_of.get(doc_id)
        if slot is None:
            slot = find_id(self.base.ids, doc_id)
            if slot is not None and not self.alive[slot]:
                return None
        return slot

    def id_at(self, slot: int) -> str:
        if slot < self.base_slots:
            return bytes(self.base.ids[slot]).decode("utf-8")
        return self.added_ids[slot - self.base_slots] or ""

    def ids(self) -> Iterator[str]:
        for raw in self.base.ids[self.alive[: self.base_slots]].tolist():
            yield raw.decode("utf-8")
        yield from self.added_slot_of

    # -- writes --------------------------------------------------------------------------------
    def upsert(self, doc_id: str, counts: Mapping[str, int]) -> None:
        """Index ``doc_id`` with these term counts, replacing any earlier version."""
        self.remove(doc_id)
        slot = self._new_slot(doc_id)
        tids = np.empty(len(counts), dtype=np.int32)
        tfs = np.empty(len(counts), dtype=np.int32)
        length = 0
        for i, (term, tf) in enumerate(counts.items()):
            tid = self.vocab.get(term)
            if tid is None:
                tid = len(self.terms)
                self.vocab[term] = tid
                self.terms.append(term)
                self.postings.append(None)
            postings = self.postings[tid]
            if postings is None:
                postings = self.postings[tid] = _Postings()
            self._move_df(postings.df, postings.df + 1)
            postings.add(slot, tf)
            tids[i] = tid
            tfs[i] = tf
            length += tf
        self.bags[slot] = np.stack((tids, tfs))
        self.doc_len[slot] = length
        self.total_len += length
        self.n_docs += 1
        self._average_idf = None

    def remove(self, doc_id: str) -> bool:
        slot = self.added_slot_of.pop(doc_id, None)
        if slot is None:
            slot = self.slot(doc_id)
            if slot is None:
                return False
        else:
            self.added_ids[slot - self.base_slots] = None
        bag = self._bag(slot)
        self.bags.pop(slot, None)
        for tid in bag[0].tolist():
            postings = self.postings[tid]
            assert postings is not None
            self._move_df(postings.df, postings.df - 1)
            postings.df -= 1
            postings.dead += 1
            if postings.df == 0:
                self.postings[tid] = None
        self.alive[slot] = False
        self.total_len -= int(bag[1].sum())
        self.n_docs -= 1
        self._average_idf = None
        dead_slots = self.slot_count - self.n_docs
        if dead_slots > max(self.n_docs, MIN_DEAD_SLOTS_TO_COMPACT):
            self.load(self.to_csr())
        return True

    def _bag(self, slot: int) -> IntArray:
        if slot < self.base_slots:
            start, end = self.base.ptr[slot : slot + 2].tolist()
            bag: IntArray = np.array(
                (self.base.tids[start:end], self.base.tfs[start:end]), dtype=np.int32
            )
            return bag
        return self.bags[slot]

    def _new_slot(self, doc_id: str) -> int:
        slot = self.slot_count
        if slot == len(self.alive):
            self.alive = np.concatenate((self.alive, np.zeros(slot, dtype=np.bool_)))
            self.doc_len = np.concatenate((self.doc_len, np.zeros(slot, dtype=LENGTH_DTYPE)))
        self.added_ids.append(doc_id)
        self.added_slot_of[doc_id] = slot
        self.alive[slot] = True
        return slot

    def _move_df(self, old: int, new: int) -> None:
        if old:
            left = self.df_hist[old] - 1
            if left:
                self.df_hist[old] = left
            else:
                del self.df_hist[old]
        if new:
            self.df_hist[new] = self.df_hist.get(new, 0) + 1

    # -- bulk form -----------------------------------------------------------------------------
    def freeze(self) -> FrozenNamespace:
        """The live documents by reference (O(documents added since the last load)): safe to
        turn into a ``NamespaceCsr`` on another thread while this index keeps changing."""
        base_alive = self.alive[: self.base_slots].copy()
        unchanged = not self.added_ids and bool(base_alive.all())
        return FrozenNamespace(
            base=self.base,
            base_alive=base_alive,
            added_ids=list(self.added_slot_of),
            added_bags=[self.bags[slot] for slot in self.added_slot_of.values()],
            terms=list(self.terms),
            columns=self.postings.columns if unchanged else None,
        )

    def to_csr(self) -> NamespaceCsr:
        return self.freeze().to_csr()

    def load(self, csr: NamespaceCsr, by_term: TermColumns | None = None) -> None:
        """Replace the whole namespace with ``csr`` in vectorised passes (restart, compaction);
        ``by_term`` is the same documents term-major (the cache's), else sorted here. The
        arrays are kept, not copied (the cache's are read-only memory maps)."""
        n = len(csr.ids)
        capacity = max(INITIAL_SLOTS, 2 * n)
        self.vocab = dict(zip(csr.vocab, range(len(csr.vocab)), strict=True))
        self.terms = list(csr.vocab)
        self.base = csr
        self.added_ids = []
        self.added_slot_of = {}
        self.bags = {}
        self.alive = np.zeros(capacity, dtype=np.bool_)
        self.alive[:n] = True
        self.doc_len = np.zeros(capacity, dtype=LENGTH_DTYPE)
        self.doc_len[:n] = _row_sums(csr.ptr, csr.tfs)
        self.n_docs = n
        self.total_len = int(csr.tfs.sum())
        columns = TermColumns.of(csr) if by_term is None else by_term
        self.postings = _PostingsTable(columns)
        terms_per_df = np.bincount(np.diff(columns.ptr))
        terms_per_df[:1] = 0  # a term no live document has is not in the histogram
        dfs = np.flatnonzero(terms_per_df)
        self.df_hist = dict(zip(dfs.tolist(), terms_per_df[dfs].tolist(), strict=True))
        self._average_idf = None

    # -- scoring -------------------------------------------------------------------------------
    def average_idf(self) -> float:
        """Mean raw idf over the vocabulary, from the df histogram (O(distinct dfs))."""
        if self._average_idf is None:
            if not self.df_hist:
                self._average_idf = 0.0
            else:
                dfs = np.fromiter(self.df_hist.keys(), np.float64, len(self.df_hist))
                counts = np.fromiter(self.df_hist.values(), np.float64, len(self.df_hist))
                raw = np.log(self.n_docs - dfs + 0.5) - np.log(dfs + 0.5)
                self._average_idf = float((counts * raw).sum() / counts.sum())
        return self._average_idf

    def idf(self, df: int) -> float:
        raw = math.log(self.n_docs - df + 0.5) - math.log(df + 0.5)
        return EPSILON * self.average_idf() if raw < 0 else raw

    def _terms(self, query: Mapping[str, int]) -> list[_QueryTerm]:
        avgdl = self.total_len / self.n_docs
        found = []
        for term, repeats in query.items():
            tid = self.vocab.get(term)
            postings = None if tid is None else self.postings[tid]
            if postings is not None:
                weight = self.idf(postings.df) * repeats
                slots, saturation, bound = postings.saturations(self.alive, self.doc_len, avgdl)
                found.append(_QueryTerm(weight, slots, saturation, weight * bound))
        return found

    def scores(self, query: Mapping[str, int]) -> tuple[IntArray, FloatArray]:
        """Slots of the live documents containing a query term, and their BM25 scores."""
        if not self.n_docs or not self.total_len:
            return _NO_SLOTS, _NO_TFS
        n = self.slot_count
        scores = np.zeros(n, dtype=np.float64)
        matched = np.zeros(n, dtype=np.bool_)
        for term in self._terms(query):
            scores[term.slots] += term.weight * term.saturation
            matched[term.slots] = True
        hits = np.flatnonzero(matched & self.alive[:n]).astype(np.int32)
        return hits, scores[hits]

    def top(self, query: Mapping[str, int], top_n: int) -> list[tuple[str, float]]:
        """The ``top_n`` best documents containing a query term, best first (ties by id).

        Max-score pruning: terms are scored rarest first; before a long postings list, if even
        the sum of the remaining terms' bounds cannot lift a document to the n-th best partial
        score of the rare terms' documents, only the documents that still can are kept and the
        remaining terms are looked up for them alone (``_finish``). Scores only grow while every
        weight is positive, so the result equals full scoring; with any weight <= 0 (tiny
        namespaces) it is full scoring.
        """
        if not self.n_docs or not self.total_len:
            return []
        terms = self._terms(query)
        if not terms:
            return []
        if min(t.weight for t in terms) <= 0:
            return self._ranked(*self.scores(query), top_n)
        terms.sort(key=lambda t: len(t.slots))
        remaining_bound = [0.0] * (len(terms) + 1)
        for i in range(len(terms) - 1, -1, -1):
            remaining_bound[i] = remaining_bound[i + 1] + terms[i].bound
        n = self.slot_count
        alive = self.alive[:n]
        # every weight and saturation is positive: a document is matched iff its score is > 0
        scores = np.zeros(n, dtype=np.float64)
        scored: list[IntArray] = []  # the postings scored before the first long list
        sample: IntArray | None = None
        for i, term in enumerate(terms):
            if i and len(term.slots) >= PRUNE_MIN_POSTINGS:
                if sample is None:
                    sample = _scored_slots(scores, scored, alive)
                # any n documents' partial scores bound the final n-th best from below; the
                # rare terms' documents hold the best ones, and they are few to read again
                if len(sample) < top_n:
                    sample = None  # too few yet: the next long list's documents join them
                else:
                    reach = _nth_best(scores[sample], top_n) * (1 - BOUND_SLACK)
                    if remaining_bound[i] < reach:
                        above = np.flatnonzero(scores >= reach - remaining_bound[i])
                        kept: IntArray = above[alive[above]].astype(np.int32)
                        slots, final = self._finish(
                            kept, scores[kept], terms[i:], remaining_bound[i + 1 :], top_n
                        )
                        return self._ranked(slots, final, top_n)
            scores[term.slots] += term.weight * term.saturation
            if sample is None:
                scored.append(term.slots)
        hits = np.flatnonzero(scores).astype(np.int32)
        hits = hits[alive[hits]]
        return self._ranked(hits, scores[hits], top_n)

    @staticmethod
    def _finish(
        kept: IntArray,
        partial: FloatArray,
        rest: list[_QueryTerm],
        bound_after: list[float],
        top_n: int,
    ) -> tuple[IntArray, FloatArray]:
        """The remaining terms added for the ``kept`` documents only. After each term the
        n-th best partial score rises, so the documents whose partial score plus the bound of
        the terms still left cannot reach it are dropped: the longest lists (the commonest
        terms, last) are looked up for the few documents that can still place."""
        for term, left in zip(rest, bound_after, strict=True):
            if len(kept) * LOOKUP_COST_POSTINGS < len(term.slots):
                at = np.minimum(np.searchsorted(term.slots, kept), len(term.slots) - 1)
                present = term.slots[at] == kept
                partial[present] += term.weight * term.saturation[at[present]]
            else:  # cheaper to spread the whole list than to search it per document
                spread = np.zeros(int(term.slots[-1]) + 1, dtype=np.float64)
                spread[term.slots] = term.saturation
                inside = kept < len(spread)
                partial[inside] += term.weight * spread[kept[inside]]
            if len(kept) > top_n:
                keep = partial + left >= _nth_best(partial, top_n) * (1 - BOUND_SLACK)
                kept, partial = kept[keep], partial[keep]
        return kept, partial

    def _ranked(self, slots: IntArray, scores: FloatArray, top_n: int) -> list[tuple[str, float]]:
        """The best ``top_n`` of ``slots`` (ascending) by score, ties by id."""
        if len(slots) > top_n:
            nth = _nth_best(scores, top_n)
            above = np.flatnonzero(scores > nth)
            tied = np.flatnonzero(scores == nth)
            need = top_n - len(above)
            if len(tied) > need:
                # ties break by id; the bulk-loaded slots are in id order, so of those only the
                # first ``need`` can place (thousands of documents may share a common term's score)
                loaded = slots[tied] < self.base_slots
                first = tied[loaded][:need]
                tied = np.concatenate((first, tied[~loaded]))
            best = np.concatenate((above, tied))
            slots, scores = slots[best], scores[best]
        ranked = [
            (self.id_at(slot), score)
            for slot, score in zip(slots.tolist(), scores.tolist(), strict=True)
        ]
        ranked.sort(key=lambda hit: (-hit[1], hit[0]))
        return ranked[:top_n]

    def coverage(self, query: Mapping[str, int], doc_ids: Sequence[str]) -> list[float | None]:
        """Per document, the share of the query's idf weight among the terms it contains.

        Not BM25's idf (negative in tiny namespaces, kept there for parity with rank_bm25) but
        Lucene's ``ln(1 + (N - df + 0.5) / (df + 0.5))``, positive at any size. A term the
        namespace has never seen weighs as much as its average term: it may name something no
        memory holds, or just be a word nobody happened to use, and a small store cannot tell.
        None for a document not indexed in this namespace.
        """
        weights: dict[int, float] = {}
        unknown = 0
        for term, repeats in query.items():
            tid = self.vocab.get(term)
            postings = None if tid is None else self.postings[tid]
            if tid is None or postings is None:
                unknown += repeats
            else:
                weights[tid] = self._positive_idf(postings.df) * repeats
        total = sum(weights.values()) + unknown * self._average_positive_idf()
        shares: list[float | None] = []
        for doc_id in doc_ids:
            slot = self.slot(doc_id)
            if slot is None:
                shares.append(None)
                continue
            present = sum(weights.get(tid, 0.0) for tid in self._bag(slot)[0].tolist())
            shares.append(present / total if total > 0 else 0.0)
        return shares

    def _positive_idf(self, df: int) -> float:
        return math.log(1 + (self.n_docs - df + 0.5) / (df + 0.5))

    def _average_positive_idf(self) -> float:
        terms = sum(self.df_hist.values())
        if not terms:
            return self._positive_idf(0)
        return sum(self._positive_idf(df) * n for df, n in self.df_hist.items()) / terms

    def terms_of(self, doc_id: str) -> dict[str, int]:
        """The indexed term counts of one document (empty if it is not indexed)."""
        slot = self.slot(doc_id)
        if slot is None:
            return {}
        tids, tfs = self._bag(slot).tolist()
        return {self.terms[tid]: tf for tid, tf in zip(tids, tfs, strict=True)}

    def vocabulary_size(self) -> int:
        return sum(self.df_hist.values())


class LexiconIndex:
    """All namespaces, and which namespace and text digest each document id is indexed with
    (the digest of the text its terms came from: an unchanged document is not re-tokenized).

    The documents of the last bulk load (the cache) stay in arrays: ids ascending, each one's
    namespace as a small integer and its digest as a fixed-width record, looked up by
    bisection; documents written since are in ``added``.
    """

    def __init__(self) -> None:
        self.namespaces: dict[str, NamespaceIndex] = {}
        self.base = DocTable.empty()
        self.base_alive: BoolArray = np.zeros(0, dtype=np.bool_)
        self.added: dict[str, tuple[str, bytes]] = {}  # id -> (namespace, digest)
        self._documents = 0

    def __len__(self) -> int:
        return self._documents

    def entry(self, doc_id: str) -> tuple[str, bytes] | None:
        """``(namespace, digest)`` of an indexed document, or None."""
        found = self.added.get(doc_id)
        if found is None:
            at = self._base_row(doc_id)
            if at is not None:
                found = self.base.names[self.base.spaces[at]], self.base.digests[at].tobytes()
        return found

    def _base_row(self, doc_id: str) -> int | None:
        at = find_id(self.base.ids, doc_id)
        return at if at is not None and self.base_alive[at] else None

    def is_current(self, doc_id: str, namespace: str, digest: bytes) -> bool:
        return self.entry(doc_id) == (namespace, digest)

    def upsert(self, doc_id: str, namespace: str, digest: bytes, counts: Mapping[str, int]) -> None:
        """Index a document; ``ValueError`` for an id with a NUL (the cache's fixed-width ids
        cannot hold one) or a digest not ``DIGEST_BYTES`` long."""
        if "\x00" in doc_id:
            raise ValueError("a document id may not contain NUL")
        if len(digest) != DIGEST_BYTES:
            raise ValueError(f"a text digest is {DIGEST_BYTES} bytes, not {len(digest)}")
        current = self.entry(doc_id)
        if current is not None and current[0] != namespace:
            self.remove(doc_id)
            current = None
        space = self.namespaces.get(namespace)
        if space is None:
            space = self.namespaces[namespace] = NamespaceIndex()
        space.upsert(doc_id, counts)
        if current is None:
            self._documents += 1
        elif (at := self._base_row(doc_id)) is not None:
            self.base_alive[at] = False
        self.added[doc_id] = (namespace, digest)

    def remove(self, doc_id: str) -> bool:
        found = self.added.pop(doc_id, None)
        if found is None:
            at = self._base_row(doc_id)
            if at is None:
                return False
            self.base_alive[at] = False
            namespace = self.base.names[self.base.spaces[at]]
        else:
            namespace = found[0]
        self._documents -= 1
        space = self.namespaces[namespace]
        space.remove(doc_id)
        if not space.n_docs:
            del self.namespaces[namespace]
        return True

    def top(self, namespace: str, query: Mapping[str, int], top_n: int) -> list[tuple[str, float]]:
        space = self.namespaces.get(namespace)
        return [] if space is None else space.top(query, top_n)

    def coverage(
        self, namespace: str, query: Mapping[str, int], doc_ids: Sequence[str]
    ) -> list[float | None]:
        space = self.namespaces.get(namespace)
        return [None] * len(doc_ids) if space is None else space.coverage(query, doc_ids)

    def ids(self, namespace: str | None = None) -> Iterable[str]:
        if namespace is None:
            return (doc_id for space in self.namespaces.values() for doc_id in space.ids())
        space = self.namespaces.get(namespace)
        return () if space is None else space.ids()

    def frozen_table(self) -> FrozenTable:
        """Every live document's namespace and digest by reference (O(documents written since
        the last load)), for a cache save on another thread."""
        return FrozenTable(self.base, self.base_alive.copy(), dict(self.added))

    def load(self, table: DocTable, spaces: Mapping[str, tuple[NamespaceCsr, TermColumns]]) -> None:
        """Install the empty index from bulk form (the cache); ``ValueError`` if the parts do
        not describe the same documents. A namespace's rows are the table's rows in that
        namespace, in the same (id) order."""
        table.validate()
        if self._documents:
            raise ValueError("the index is not empty")
        if sorted(spaces) != sorted(table.names):
            raise ValueError("namespaces do not match the document table")
        for code, name in enumerate(table.names):
            csr, by_term = spaces[name]
            csr.validate()
            by_term.validate(csr)
            if not np.array_equal(csr.ids, table.ids[table.spaces == code]):
                raise ValueError(f"namespace {name!r} rows do not match the document table")
        for name, (csr, by_term) in spaces.items():
            space = NamespaceIndex()
            space.load(csr, by_term)
            if space.n_docs:
                self.namespaces[name] = space
        self.base = table
        self.base_alive = np.ones(len(table.ids), dtype=np.bool_)
        self._documents = len(table.ids)

    def clear(self) -> None:
        self.namespaces.clear()
        self.base = DocTable.empty()
        self.base_alive = np.zeros(0, dtype=np.bool_)
        self.added.clear()
        self._documents = 0


@dataclass(frozen=True, slots=True)
class DocTable:
    """Documents in bulk form: ids ascending, each one's namespace (``names[spaces[i]]``) and
    text digest."""

    ids: IdArray
    spaces: AnyIntArray
    digests: npt.NDArray[np.void]  # DIGEST_BYTES-wide records
    names: list[str]

    @classmethod
    def empty(cls) -> DocTable:
        return cls(NO_IDS, np.zeros(0, np.uint8), np.zeros(0, DIGEST_DTYPE), [])

    def validate(self) -> None:
        n = len(self.ids)
        if len(self.spaces) != n or len(self.digests) != n:
            raise ValueError("document table columns differ in length")
        if self.digests.dtype != DIGEST_DTYPE:
            raise ValueError("digest records of the wrong width")
        if n and (int(self.spaces.min()) < 0 or int(self.spaces.max()) >= len(self.names)):
            raise ValueError("namespace number outside the names")
        if len(set(self.names)) != len(self.names):
            raise ValueError("duplicate namespace name")
        if not ascending_ids(self.ids):
            raise ValueError("document ids not ascending or not unique")


@dataclass(frozen=True, slots=True)
class FrozenTable:
    """``LexiconIndex``'s documents at one moment; ``to_table`` may run on another thread."""

    base: DocTable
    base_alive: BoolArray
    added: dict[str, tuple[str, bytes]]

    def to_table(self) -> DocTable:
        """The live documents, ids ascending, over the namespaces that have any."""
        base = self.base
        # unchanged since the last bulk load (a save right after a first index): as it is,
        # not a sort of a million namespace names as Python objects
        unchanged = not self.added and bool(self.base_alive.all())
        if unchanged and np.bincount(base.spaces, minlength=len(base.names)).all():
            return base
        keep = np.flatnonzero(self.base_alive)
        # Namespaces are renumbered through their few names, never one Python object per
        # document: sorting a million names as objects holds the GIL for ~0.4 s, which the
        # serving thread's queries waited out (docs/history/hook-and-up-2026-12-02c.md).
        base_spaces = base.spaces[keep]
        live = np.flatnonzero(np.bincount(base_spaces, minlength=len(base.names)))
        added_names = [space for space, _ in self.added.values()]
        names = sorted({base.names[code] for code in live.tolist()}.union(added_names))
        number = {name: i for i, name in enumerate(names)}
        renumbered = np.array([number.get(name, 0) for name in base.names], dtype=np.int64)
        spaces = np.concatenate(
            (
                renumbered[base_spaces],
                np.array([number[name] for name in added_names], dtype=np.int64),
            )
        )
        ids = np.concatenate((base.ids[keep], encode_ids(list(self.added))))
        digests = np.concatenate(
            (
                base.digests[keep],
                np.frombuffer(b"".join(d for _, d in self.added.values()), DIGEST_DTYPE),
            )
        )
        order = np.argsort(ids, kind="stable")
        return DocTable(
            ids=ids[order],
            spaces=spaces.astype(np.min_scalar_type(max(len(names) - 1, 0)))[order],
            digests=digests[order],
            names=names,
        )
