"""Memories' text vectors, per namespace, for the dense candidate leg of hybrid recall.

The key path reaches a memory only through a key the query matches and BM25 only through a
word it shares; a question in another script, or one that paraphrases its answer, reaches
neither. The dense leg asks which memories' own text vectors lie nearest the query's
(``nearest``), whatever words they share. It only proposes candidates: the reranker scores
every one of them again from its own vectors, so the leg's vectors may be coarse.

Two codes (``CODES``):

* ``i8`` — 8 bits per dimension with one float32 scale per row (the row's largest magnitude
  over 127): 516 bytes a 512-d memory; the cosine it gives is within a percent of float32's.
* ``bits`` — the sign of each dimension, packed: 64 bytes a 512-d memory; similarity is the
  number of agreeing signs (the Hamming distance's complement), an order-preserving estimate
  of the angle good enough to propose candidates. Rows are kept word-major, so a scan is eight
  contiguous XOR + popcount passes over 64-bit words.

Rows are appended into spare capacity, and removed rows dropped in bulk (``NamespaceVectors``),
so writes cost O(dim). The graph keeps ``bits`` (``PRODUCT_CODE``): its codes
are what the file stores (``code_of``) and what a start loads, one buffer per namespace
(``load``); ``i8`` serves the experiments that compared the two (benchmarks/).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

INITIAL_CAPACITY = 64
# Removed rows are dropped in one pass once they are this share (1/4) of a namespace's rows,
# and at least this many: a pass is O(rows), so removals cost O(1) each in the long run.
COMPACT_SHARE = 4
COMPACT_MIN_ROWS = 64
I8_MAX = 127
SCAN_CHUNK_ROWS = 16_384  # i8 rows widened to float32 at a time (32 MB at 512-d)
CODES = ("i8", "bits")
PRODUCT_CODE = "bits"
WORD_BITS = 64
WORD_DTYPE = np.dtype("<u8")  # a stored code's words, little-endian whatever the machine


def quantise(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit float32 rows as int8 rows and their float32 scales (row ≈ int8 × scale)."""
    peak = np.abs(vectors).max(axis=1)
    scales = np.where(peak > 0, peak / I8_MAX, 1.0).astype(np.float32)
    rows = np.rint(vectors / scales[:, None]).astype(np.int8)
    return rows, scales


def sign_words(vector: np.ndarray) -> np.ndarray:
    """A vector's signs packed into 64-bit words (the dimension padded to a multiple of 64)."""
    words = -(-vector.shape[0] // WORD_BITS)
    bits = np.zeros(words * WORD_BITS, dtype=bool)
    bits[: vector.shape[0]] = vector > 0
    return np.packbits(bits).view(WORD_DTYPE).astype(np.uint64)


def code_of(vector: np.ndarray) -> bytes:
    """The ``bits`` code of a vector as the file stores it."""
    return sign_words(vector).astype(WORD_DTYPE).tobytes()


class NamespaceVectors:
    """One namespace's memory vectors in one code, with spare rows. A memory is put once (the
    graph's ids are never reused); a removed one keeps its row, skipped, until a quarter of
    the rows are removed and one pass drops them: no map from memory to row, which at 1M
    memories held more than the codes themselves."""

    def __init__(self, dim: int, code: str) -> None:
        self.dim = dim
        self.code = code
        self.ids: list[str] = []
        self.removed: set[str] = set()  # rows still held, of memories taken out
        if code == "i8":
            self.rows = np.zeros((INITIAL_CAPACITY, dim), dtype=np.int8)
        else:  # word-major: one contiguous array of every row's w-th word
            self.rows = np.zeros((-(-dim // WORD_BITS), INITIAL_CAPACITY), dtype=np.uint64)
        self.scales = np.zeros(INITIAL_CAPACITY, dtype=np.float32)

    def __len__(self) -> int:
        return len(self.ids) - len(self.removed)

    @classmethod
    def of_codes(cls, dim: int, ids: list[str], codes: np.ndarray) -> NamespaceVectors:
        """``bits`` rows from stored codes (one ``code_of`` row per id), in one copy."""
        space = cls(dim, "bits")
        space.ids = ids
        words = np.frombuffer(np.ascontiguousarray(codes), dtype=WORD_DTYPE)
        space.rows = np.ascontiguousarray(words.reshape(len(ids), -1).T, dtype=np.uint64)
        space.scales = np.zeros(len(ids), dtype=np.float32)
        return space

    def _set(self, at: int, vector: np.ndarray) -> None:
        if self.code == "i8":
            rows, scales = quantise(vector.reshape(1, -1).astype(np.float32))
            self.rows[at] = rows[0]
            self.scales[at] = scales[0]
        else:
            self.rows[:, at] = sign_words(vector)

    def _grow(self) -> None:
        axis = 0 if self.code == "i8" else 1
        extra = max(INITIAL_CAPACITY, self.scales.shape[0])
        pad = [(0, 0), (0, 0)]
        pad[axis] = (0, extra)
        self.rows = np.pad(self.rows, pad)
        self.scales = np.pad(self.scales, (0, extra))

    def _new_row(self, memory_id: str) -> int:
        at = len(self.ids)
        if at == self.scales.shape[0]:
            self._grow()
        self.ids.append(memory_id)
        return at

    def put(self, memory_id: str, vector: np.ndarray) -> None:
        self._set(self._new_row(memory_id), vector)

    def put_code(self, memory_id: str, code: bytes) -> None:
        """A stored ``bits`` code (``code_of``) as the memory's row."""
        at = self._new_row(memory_id)  # may grow ``rows``: look them up after
        self.rows[:, at] = np.frombuffer(code, dtype=WORD_DTYPE)

    def remove(self, memory_id: str) -> None:
        """Take a memory that has a row out (its row is dropped with the next compaction)."""
        self.removed.add(memory_id)
        if len(self.removed) >= max(COMPACT_MIN_ROWS, len(self.ids) // COMPACT_SHARE):
            self._compact()

    def _compact(self) -> None:
        kept = [at for at, memory_id in enumerate(self.ids) if memory_id not in self.removed]
        self.ids = [self.ids[at] for at in kept]
        self.rows = self.rows[kept] if self.code == "i8" else self.rows[:, kept]
        self.scales = self.scales[kept]
        self.removed.clear()

    def similarities(self, query: np.ndarray) -> np.ndarray:
        """Every row's similarity to the unit ``query``, higher nearer: the cosine (``i8``)
        or the count of agreeing signs (``bits``)."""
        count = len(self.ids)
        if self.code == "bits":
            words = sign_words(query)
            differ = np.zeros(count, dtype=np.uint16)
            for w, word in enumerate(words):
                differ += np.bitwise_count(self.rows[w, :count] ^ word)
            return (self.dim - differ).astype(np.float32)
        out = np.empty(count, dtype=np.float32)
        for at in range(0, count, SCAN_CHUNK_ROWS):
            end = min(at + SCAN_CHUNK_ROWS, count)
            out[at:end] = (self.rows[at:end].astype(np.float32) @ query) * self.scales[at:end]
        return out


class MemoryVectors:
    """Every namespace's memory vectors; the graph keeps one (``GraphState.memory_vectors``).
    A memory is named with its namespace (the graph knows it): no map from memory to
    namespace, ~50 bytes a memory at 1M."""

    def __init__(self, code: str = "i8") -> None:
        if code not in CODES:
            raise ValueError(f"code must be one of {CODES}")
        self.code = code
        self.namespaces: dict[str, NamespaceVectors] = {}

    def __len__(self) -> int:
        return sum(len(space) for space in self.namespaces.values())

    def _space(self, namespace: str, dim: int) -> NamespaceVectors:
        space = self.namespaces.get(namespace)
        if space is None:
            space = self.namespaces[namespace] = NamespaceVectors(dim, self.code)
        return space

    def put(self, namespace: str, memory_id: str, vector: np.ndarray) -> None:
        """``memory_id``'s unit vector (a memory is put once)."""
        self._space(namespace, vector.shape[0]).put(memory_id, vector)

    def put_code(self, namespace: str, memory_id: str, code: bytes, dim: int) -> None:
        """``memory_id``'s stored ``bits`` code of a ``dim``-dimensional vector."""
        self._space(namespace, dim).put_code(memory_id, code)

    def load(self, namespace: str, dim: int, ids: list[str], codes: np.ndarray) -> None:
        """A namespace's stored ``bits`` codes at once (a start: no row-by-row fill)."""
        if self.code != "bits":
            raise ValueError("stored codes are bits")
        self.namespaces[namespace] = NamespaceVectors.of_codes(dim, ids, codes)

    def clear(self) -> None:
        self.namespaces.clear()

    def remove(self, namespace: str, memory_id: str) -> None:
        """Take out a memory that was put."""
        space = self.namespaces.get(namespace)
        if space is not None:
            space.remove(memory_id)

    def nearest(
        self, namespace: str, query: np.ndarray, count: int, keep: Callable[[str], bool]
    ) -> list[str]:
        """The ``count`` memories of ``namespace`` nearest the unit ``query`` that ``keep``
        admits, best first."""
        space = self.namespaces.get(namespace)
        if space is None or not len(space) or count <= 0 or query.shape[0] != space.dim:
            return []
        distance = -space.similarities(query)
        ids, rows = space.ids, len(space.ids)  # removed rows are scanned, then skipped
        # the best few first; the rest only when ``keep`` refused too many of them
        ask = min(rows, 2 * count)
        while True:
            if ask < rows:  # every row as near as the ask-th: ties cut by id, not by row
                bound = np.partition(distance, ask - 1)[ask - 1]
                top = np.flatnonzero(distance <= bound).tolist()
            else:
                top = list(range(rows))
            # ties by id: a store gives the same order however its rows were filled
            order = sorted(top, key=lambda at: (distance[at], ids[at]))
            found = [ids[at] for at in order if ids[at] not in space.removed and keep(ids[at])][
                :count
            ]
            if len(found) == count or ask == rows:
                return found
            ask = min(rows, 4 * ask)
