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

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat

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

IntArray = npt.NDArray[np.int32]
FloatArray = npt.NDArray[np.float64]

_NO_SLOTS: IntArray = np.zeros(0, dtype=np.int32)
_NO_TFS: FloatArray = np.zeros(0, dtype=np.float64)


@dataclass(frozen=True, slots=True)
class _QueryTerm:
    weight: float  # idf x repeats in the query
    slots: IntArray
    saturation: FloatArray
    bound: float  # the most this term adds to any document's score


class _Postings:
    """One term's (slot, term frequency) entries: merged arrays plus a pending tail."""

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

    def __init__(self, slots: IntArray = _NO_SLOTS, tfs: FloatArray = _NO_TFS) -> None:
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

    def arrays(self, alive: npt.NDArray[np.bool_]) -> tuple[IntArray, FloatArray]:
        if self.pending_slots:
            self.slots = np.concatenate(
                (self.slots, np.asarray(self.pending_slots, dtype=np.int32))
            )
            self.tfs = np.concatenate((self.tfs, np.asarray(self.pending_tfs, dtype=np.float64)))
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
        self, alive: npt.NDArray[np.bool_], doc_len: FloatArray, avgdl: float
    ) -> tuple[IntArray, FloatArray, float]:
        """Slots (ascending), ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avgdl))`` per
        entry, and the largest of those (the term's bound, per unit of weight)."""
        slots, tfs = self.arrays(alive)
        if self.saturation is None or self.saturation_avgdl != avgdl:
            norm = (K1 * (1 - B)) + (K1 * B / avgdl) * doc_len[slots]
            self.saturation = tfs * (K1 + 1) / (tfs + norm)
            self.saturation_avgdl = avgdl
            self.saturation_max = float(self.saturation.max()) if len(slots) else 0.0
        return slots, self.saturation, self.saturation_max


@dataclass(frozen=True, slots=True)
class NamespaceCsr:
    """A namespace's live documents in compressed rows: what the cache stores and loads.

    Row ``i`` is document ``ids[i]``; its terms are ``vocab[tids[ptr[i]:ptr[i + 1]]]`` with
    counts ``tfs[ptr[i]:ptr[i + 1]]`` (each term once per row).
    """

    ids: list[str]
    vocab: list[str]
    ptr: npt.NDArray[np.int64]
    tids: IntArray
    tfs: IntArray

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
        if len(set(self.ids)) != rows:
            raise ValueError("duplicate document id")


@dataclass(frozen=True, slots=True)
class TermColumns:
    """The same documents term-major: term ``t``'s postings are rows ``rows[ptr[t]:ptr[t + 1]]``
    (ascending) with counts ``tfs[...]``. The cache stores them so a restart needs no sort."""

    ptr: npt.NDArray[np.int64]
    rows: IntArray
    tfs: IntArray

    @classmethod
    def of(cls, csr: NamespaceCsr) -> TermColumns:
        rows = np.repeat(np.arange(len(csr.ids), dtype=np.int32), np.diff(csr.ptr))
        # a stable sort of 16-bit keys is a radix sort: ~4x faster than sorting int32 keys
        keys = csr.tids.astype(np.uint16) if len(csr.vocab) <= RADIX_SORT_MAX_TERMS else csr.tids
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
            _Postings(self._base.rows[start:end], self._base.tfs[start:end].astype(np.float64))
            if end > start
            else None
        )
        self._made[tid] = postings
        return postings


@dataclass(frozen=True, slots=True)
class FrozenNamespace:
    ids: list[str]
    bags: list[IntArray]  # per document: row 0 term ids, row 1 counts (never mutated)
    terms: list[str]

    def to_csr(self) -> NamespaceCsr:
        """The documents over a vocabulary of their terms only, renumbered in their old order."""
        sizes = np.fromiter((bag.shape[1] for bag in self.bags), np.int64, len(self.bags))
        ptr = np.zeros(len(self.bags) + 1, dtype=np.int64)
        np.cumsum(sizes, out=ptr[1:])
        pairs = np.concatenate(self.bags, axis=1) if self.bags else np.zeros((2, 0), np.int32)
        used = np.bincount(pairs[0], minlength=len(self.terms)) > 0
        dense = (np.cumsum(used) - 1).astype(np.int32)
        return NamespaceCsr(
            ids=self.ids,
            vocab=[self.terms[tid] for tid in np.flatnonzero(used).tolist()],
            ptr=ptr,
            tids=dense[pairs[0]],
            tfs=pairs[1].astype(np.int32),
        )


class NamespaceIndex:
    """BM25 over one namespace's documents."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.terms: list[str] = []
        self.postings = _PostingsTable()
        self.slot_ids: list[str | None] = []
        self.slot_of: dict[str, int] = {}
        # A live slot's bag (row 0 the term ids, row 1 their counts): slots below
        # ``base_slots`` read theirs from ``base_pairs`` (as loaded), later ones from ``bags``.
        self.bags: dict[int, IntArray] = {}
        self.base_slots = 0
        self.base_pairs: IntArray = np.zeros((2, 0), dtype=np.int32)
        self.base_ptr: list[int] = [0]
        self.doc_len: FloatArray = np.zeros(INITIAL_SLOTS, dtype=np.float64)
        self.alive: npt.NDArray[np.bool_] = np.zeros(INITIAL_SLOTS, dtype=np.bool_)
        self.n_docs = 0
        self.total_len = 0
        self.df_hist: dict[int, int] = {}  # document frequency -> how many terms have it
        self._average_idf: float | None = None

    # -- writes --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.n_docs

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.slot_of

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
        slot = self.slot_of.pop(doc_id, None)
        if slot is None:
            return False
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
        self.slot_ids[slot] = None
        self.total_len -= int(bag[1].sum())
        self.n_docs -= 1
        self._average_idf = None
        dead_slots = len(self.slot_ids) - self.n_docs
        if dead_slots > max(self.n_docs, MIN_DEAD_SLOTS_TO_COMPACT):
            self.load(self.to_csr())
        return True

    def _bag(self, slot: int) -> IntArray:
        if slot < self.base_slots:
            return self.base_pairs[:, self.base_ptr[slot] : self.base_ptr[slot + 1]]
        return self.bags[slot]

    def _new_slot(self, doc_id: str) -> int:
        slot = len(self.slot_ids)
        if slot == len(self.alive):
            self.alive = np.concatenate((self.alive, np.zeros(slot, dtype=np.bool_)))
            self.doc_len = np.concatenate((self.doc_len, np.zeros(slot, dtype=np.float64)))
        self.slot_ids.append(doc_id)
        self.slot_of[doc_id] = slot
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
        """References to the live documents' (immutable) bags, in slot order: cheap, and safe
        to turn into a ``NamespaceCsr`` on another thread while this index keeps changing."""
        live = sorted(self.slot_of.values())
        return FrozenNamespace(
            ids=[self.slot_ids[slot] or "" for slot in live],
            bags=[self._bag(slot) for slot in live],
            terms=list(self.terms),
        )

    def to_csr(self) -> NamespaceCsr:
        return self.freeze().to_csr()

    def load(self, csr: NamespaceCsr, by_term: TermColumns | None = None) -> None:
        """Replace the whole namespace with ``csr`` in vectorised passes (restart, compaction);
        ``by_term`` is the same documents term-major (the cache's), else sorted here."""
        n = len(csr.ids)
        capacity = max(INITIAL_SLOTS, 2 * n)
        rows = np.repeat(np.arange(n, dtype=np.int32), np.diff(csr.ptr))
        self.vocab = dict(zip(csr.vocab, range(len(csr.vocab)), strict=True))
        self.terms = list(csr.vocab)
        self.slot_ids = list[str | None](csr.ids)
        self.slot_of = dict(zip(csr.ids, range(n), strict=True))
        self.alive = np.zeros(capacity, dtype=np.bool_)
        self.alive[:n] = True
        self.doc_len = np.zeros(capacity, dtype=np.float64)
        self.doc_len[:n] = np.bincount(rows, weights=csr.tfs, minlength=n)
        self.n_docs = n
        self.total_len = int(csr.tfs.sum())
        self.bags = {}
        self.base_slots = n
        self.base_pairs = np.stack((csr.tids, csr.tfs))
        self.base_ptr = csr.ptr.tolist()
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
        n = len(self.slot_ids)
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
        the sum of the remaining terms' bounds cannot lift a document to the current n-th best
        partial score, the remaining terms are added only for the documents that still can
        (looked up in the ascending postings). Scores only grow while every weight is positive,
        so the result equals full scoring; with any weight <= 0 (tiny namespaces) it is full
        scoring.
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
        n = len(self.slot_ids)
        alive = self.alive[:n]
        scores = np.zeros(n, dtype=np.float64)
        matched = np.zeros(n, dtype=np.bool_)
        for i, term in enumerate(terms):
            if i and len(term.slots) >= PRUNE_MIN_POSTINGS:
                kept = self._survivors(scores, matched & alive, top_n, remaining_bound[i])
                if kept is not None:
                    return self._ranked(kept, self._finish(kept, scores, terms[i:]), top_n)
            scores[term.slots] += term.weight * term.saturation
            matched[term.slots] = True
        hits = np.flatnonzero(matched & alive).astype(np.int32)
        return self._ranked(hits, scores[hits], top_n)

    @staticmethod
    def _survivors(
        scores: FloatArray, candidates: npt.NDArray[np.bool_], top_n: int, rest: float
    ) -> IntArray | None:
        """Documents that can still reach the top ``top_n``, or None if pruning cannot help."""
        slots = np.flatnonzero(candidates)
        if len(slots) < top_n:
            return None
        partial = scores[slots]
        nth = np.partition(partial, len(partial) - top_n)[len(partial) - top_n]
        if rest >= nth:
            return None
        kept: IntArray = slots[partial + rest >= nth].astype(np.int32)
        return kept

    @staticmethod
    def _finish(kept: IntArray, scores: FloatArray, rest: list[_QueryTerm]) -> FloatArray:
        final = scores[kept]
        for term in rest:
            at = np.minimum(np.searchsorted(term.slots, kept), len(term.slots) - 1)
            present = term.slots[at] == kept
            final[present] += term.weight * term.saturation[at[present]]
        return final

    def _ranked(self, slots: IntArray, scores: FloatArray, top_n: int) -> list[tuple[str, float]]:
        if len(slots) > top_n:
            # keep everything tied with the n-th score, so ties break by id, not by position
            nth = np.partition(scores, len(scores) - top_n)[len(scores) - top_n]
            best = np.flatnonzero(scores >= nth)
            slots, scores = slots[best], scores[best]
        ranked = [
            (self.slot_ids[slot] or "", score)
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
            slot = self.slot_of.get(doc_id)
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
        slot = self.slot_of.get(doc_id)
        if slot is None:
            return {}
        tids, tfs = self._bag(slot).tolist()
        return {self.terms[tid]: tf for tid, tf in zip(tids, tfs, strict=True)}

    def vocabulary_size(self) -> int:
        return sum(self.df_hist.values())


class LexiconIndex:
    """All namespaces, and which namespace and text digest each document id is indexed with
    (the digest of the text its terms came from: an unchanged document is not re-tokenized)."""

    def __init__(self) -> None:
        self.namespaces: dict[str, NamespaceIndex] = {}
        self.namespace_of: dict[str, str] = {}
        self.digest_of: dict[str, bytes] = {}

    def __len__(self) -> int:
        return len(self.namespace_of)

    def is_current(self, doc_id: str, namespace: str, digest: bytes) -> bool:
        return self.namespace_of.get(doc_id) == namespace and self.digest_of[doc_id] == digest

    def upsert(self, doc_id: str, namespace: str, digest: bytes, counts: Mapping[str, int]) -> None:
        if self.namespace_of.get(doc_id, namespace) != namespace:
            self.remove(doc_id)
        space = self.namespaces.get(namespace)
        if space is None:
            space = self.namespaces[namespace] = NamespaceIndex()
        space.upsert(doc_id, counts)
        self.namespace_of[doc_id] = namespace
        self.digest_of[doc_id] = digest

    def remove(self, doc_id: str) -> bool:
        namespace = self.namespace_of.pop(doc_id, None)
        if namespace is None:
            return False
        del self.digest_of[doc_id]
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
            return self.namespace_of.keys()
        space = self.namespaces.get(namespace)
        return () if space is None else space.slot_of.keys()

    def load_namespace(
        self,
        namespace: str,
        csr: NamespaceCsr,
        digests: Sequence[bytes],
        by_term: TermColumns | None = None,
    ) -> None:
        """Install a whole namespace (from the cache); ``ValueError`` if it does not fit."""
        csr.validate()
        if by_term is not None:
            by_term.validate(csr)
        if len(digests) != len(csr.ids):
            raise ValueError("digest count does not match the document count")
        if namespace in self.namespaces or not self.namespace_of.keys().isdisjoint(csr.ids):
            raise ValueError(f"namespace {namespace!r} overlaps documents already loaded")
        space = NamespaceIndex()
        space.load(csr, by_term)
        if space.n_docs:
            self.namespaces[namespace] = space
        self.namespace_of.update(zip(csr.ids, repeat(namespace)))
        self.digest_of.update(zip(csr.ids, digests, strict=True))

    def clear(self) -> None:
        self.namespaces.clear()
        self.namespace_of.clear()
        self.digest_of.clear()
