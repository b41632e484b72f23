"""One namespace's keys as a float32 matrix plus literal-surface dictionaries.

Cosine against every key of a namespace is one matrix-vector product (vectors are stored
L2-normalised). Rows are appended into spare capacity and removed by swapping the last row in,
so writes cost O(dim), not a rebuild. A namespace with many concept keys also has an
approximate index (``keyann.py``), attached by ``keyann.KeyAnn`` and kept in step here: the
candidate concept keys then come from it, and the matrix ranks them. Once it serves, the
matrix is held in half precision (``halve``: 1 KB a key instead of 2, ~360 MB saved at a 1M
store's 353k keys), a key's vector is its row widened (a cosine within 2**-11 of float32's).
The store keeps every key's float32 vector; a new key is written from its own.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import NamedTuple

import numpy as np

from keymem.services.graph.keyann import (
    LOOKUP_EXPANSION,
    SEARCH_EXPANSION,
    Approximate,
    Snapshot,
    candidates_for,
)
from keymem.services.graph.text import script_of, surface_norm
from keymem.store.records import KeyRecord

INITIAL_CAPACITY = 64
# A key record's vector when the record does not hold it: in a namespace whose matrix is
# halved it is read from the matrix (``KeyIndex.vector``; ``GraphState.key_vector``). Empty, so
# a reader that forgets fails on the shape instead of computing with a wrong vector.
UNHELD_VECTOR = np.zeros(0, dtype=np.float32)
UNHELD_VECTOR.flags.writeable = False
# ``KeyIndex.best_concept``: a vector no lookup was made ahead for (None means none is near)
NOT_AHEAD = ("", 0.0)
# ``KeyIndex.look_ahead``'s vectors a product: the cosines of 256 against a 20k-key namespace
# are 20 MB (a batch of 200 memories may bring thousands of new keys)
LOOK_AHEAD_VECTORS = 256
# Concept keys written since the approximate index last took them in, searched exactly beside
# it, at most this many (a write past it inserts at once): each costs a lookup 512 multiply-adds,
# and an insert into the index ~0.15 ms (60k real keys), which ``settle`` spends between requests.
UNSETTLED_MAX_KEYS = 2048
# keys ``settle`` inserts in one call (~0.15 ms each): the longest a request waits for it
SETTLE_KEYS_PER_CALL = 16


class KeyIndex:
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.ids: list[str] = []
        self.pos: dict[str, int] = {}
        # float16 once halved (``halve``), float32 before
        self.matrix: np.ndarray = np.zeros((INITIAL_CAPACITY, dim), dtype=np.float32)
        self.concept_mask = np.zeros(INITIAL_CAPACITY, dtype=bool)
        # surface_norm(concept or alias) -> key ids (literal matching of queries); a tuple: a
        # surface names one key almost always, and a 1-tuple is 56 bytes where a set is 216
        self.literal: dict[str, tuple[str, ...]] = {}
        # stripped lower-case concept or alias -> key id (exact key resolution on write)
        self.exact: dict[str, str] = {}
        # writing system -> keys whose concept is written in it (remember's language hint)
        self.scripts: Counter[str | None] = Counter()
        # the concept keys' approximate index, once the namespace is large (keyann.py)
        self.approximate: Approximate | None = None
        # a batch's lookups made ahead (``look_ahead``): vector bytes -> nearest concept key
        self.ahead: dict[bytes, tuple[str, float] | None] | None = None
        # the concept keys added since, with their vectors, which those lookups did not see
        self.added_since: list[tuple[str, np.ndarray]] = []
        # concept keys the serving approximate index has not taken in yet, with their float32
        # vectors, searched exactly beside it (``settle`` inserts them between requests)
        self.unsettled: dict[str, np.ndarray] = {}
        self._unsettled_matrix: tuple[list[str], np.ndarray] | None = None

    @classmethod
    def bulk(cls, dim: int, keys: list[KeyRecord], held: np.ndarray | None = None) -> KeyIndex:
        """An index over ``keys`` built in one go (start-up), with room to grow: ``held`` is a
        matrix whose first rows are already the keys' vectors, in order (the load's), which
        the index then serves from and grows into instead of a copy."""
        index = cls(dim)
        if held is not None:
            index.matrix = held
        else:
            index.matrix = np.zeros((max(INITIAL_CAPACITY, 2 * len(keys)), dim), dtype=np.float32)
            if keys:  # stacked in place: a temporary copy costs a key matrix of page faults
                np.stack([k.vector for k in keys], out=index.matrix[: len(keys)])
        capacity = len(index.matrix)
        index.concept_mask = np.zeros(capacity, dtype=bool)
        index.concept_mask[: len(keys)] = [not k.is_entity for k in keys]
        index.ids = [k.id for k in keys]
        index.pos = {key_id: i for i, key_id in enumerate(index.ids)}
        for key in keys:
            for surface in key.surfaces():
                index.add_surface(key.id, surface)
        index.scripts.update(script_of(k.concept) for k in keys)
        return index

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, key: KeyRecord) -> None:
        n = len(self.ids)
        if n == len(self.concept_mask):
            mask = np.zeros(2 * n, dtype=bool)
            mask[:n] = self.concept_mask
            self.concept_mask = mask
            grown = np.zeros((2 * n, self.dim), dtype=self.matrix.dtype)
            grown[:n] = self.matrix
            self.matrix = grown
        self.matrix[n] = key.vector
        self.concept_mask[n] = not key.is_entity
        self.ids.append(key.id)
        self.pos[key.id] = n
        for surface in key.surfaces():
            self.add_surface(key.id, surface)
        self.scripts[script_of(key.concept)] += 1
        if self.ahead is not None and not key.is_entity:
            self.added_since.append((key.id, key.vector))
        if not key.is_entity:
            self._put(key.id, key.vector)

    def _put(self, key_id: str, vector: np.ndarray) -> None:
        """A concept key for the approximate index: unsettled while it serves (its insert waits
        for ``settle``), else queued or dropped as ``Approximate.put`` does."""
        approximate = self.approximate
        if approximate is None:
            return
        if approximate.ready() and len(self.unsettled) < UNSETTLED_MAX_KEYS:
            approximate.put(key_id, None)  # a key put again is found once, as unsettled
            self.unsettled[key_id] = vector
            self._unsettled_matrix = None
        else:
            approximate.put(key_id, vector)

    def _unput(self, key_id: str) -> None:
        if self.unsettled.pop(key_id, None) is not None:
            self._unsettled_matrix = None
        if self.approximate is not None:
            self.approximate.put(key_id, None)

    def settle(self, count: int = SETTLE_KEYS_PER_CALL) -> bool:
        """Insert up to ``count`` unsettled keys into the approximate index, oldest first, in
        one call; True while some remain."""
        if not self.unsettled:
            return False
        assert self.approximate is not None, "unsettled keys wait for a serving index"
        taken = list(itertools.islice(self.unsettled, count))
        self.approximate.put_many(taken, np.stack([self.unsettled.pop(k) for k in taken]))
        self._unsettled_matrix = None
        return bool(self.unsettled)

    def add_surface(self, key_id: str, surface: str) -> None:
        norm = _same(surface_norm(surface), surface)
        if norm:
            holders = self.literal.get(norm, ())
            if key_id not in holders:
                self.literal[norm] = (*holders, key_id)
        self.exact.setdefault(_same(_same(surface.strip().lower(), surface), norm), key_id)

    def remove(self, key: KeyRecord) -> None:
        self.end_look_ahead()  # a lookup made ahead may name this key
        index = self.pos.pop(key.id)
        if self.concept_mask[index]:
            self._unput(key.id)
        last = len(self.ids) - 1
        if index != last:
            moved = self.ids[last]
            self.ids[index] = moved
            self.pos[moved] = index
            self.matrix[index] = self.matrix[last]
            self.concept_mask[index] = self.concept_mask[last]
        self.ids.pop()
        self.scripts[script_of(key.concept)] -= 1
        self.matrix[last] = 0.0
        self.concept_mask[last] = False
        for surface in key.surfaces():
            norm = surface_norm(surface)
            holders = self.literal.get(norm, ())
            if key.id in holders:
                rest = tuple(k for k in holders if k != key.id)
                if rest:
                    self.literal[norm] = rest
                else:
                    del self.literal[norm]
            exact = surface.strip().lower()
            if self.exact.get(exact) == key.id:
                del self.exact[exact]

    def set_entity(self, key: KeyRecord) -> None:
        self.end_look_ahead()  # a key left or joined the concepts the lookups weighed
        row = self.pos[key.id]
        self.concept_mask[row] = not key.is_entity
        if key.is_entity:
            self._unput(key.id)
        else:
            self._put(key.id, self.vector(key.id).copy())  # a row moves with removals

    def vector(self, key_id: str) -> np.ndarray:
        """The key's float32 vector: its matrix row, widened (a new array) once halved."""
        row: np.ndarray = self.matrix[self.pos[key_id]]
        return row if not self.halved else row.astype(np.float32)

    def vectors(self, key_ids: list[str]) -> np.ndarray:
        """Several keys' float32 vectors [len(key_ids), dim] (a new array)."""
        rows = np.fromiter((self.pos[k] for k in key_ids), dtype=np.intp, count=len(key_ids))
        return self.matrix[rows].astype(np.float32, copy=False)

    def cosine(self, key_id: str, vector: np.ndarray) -> float:
        return float(self.vector(key_id) @ vector)

    def cosines(self, key_ids: list[str], vector: np.ndarray) -> list[float]:
        return [self.cosine(key_id, vector) for key_id in key_ids]

    @property
    def halved(self) -> bool:
        return self.matrix.dtype == np.float16

    def halve(self) -> bool:
        """Hold the matrix in half precision once the approximate index serves the concept keys
        (it finds their candidates; the exact scan is over). True when halved now: the caller
        points the key records away from the float32 rows."""
        if self.halved or self.approximate is None or not self.approximate.ready():
            return False
        n = len(self.ids)
        half = np.zeros(self.matrix.shape, dtype=np.float16)  # rows never written stay unbacked
        half[:n] = self.matrix[:n]
        self.matrix = half
        return True

    def concept_count(self) -> int:
        return int(np.count_nonzero(self.concept_mask[: len(self.ids)]))

    def snapshot(self, namespace: str, fingerprint: str | None) -> Snapshot:
        """The concept keys as they are now, copied for a background reader."""
        n = len(self.ids)
        rows = np.flatnonzero(self.concept_mask[:n])
        return Snapshot(
            namespace,
            fingerprint,
            [self.ids[i] for i in rows.tolist()],
            self.matrix[rows].astype(np.float16),
        )

    def nearest_concepts(
        self, vectors: np.ndarray, take: int, expansion: int = SEARCH_EXPANSION
    ) -> list[Nearest]:
        """For each row of ``vectors`` (m, dim; unit length) the rows of its ``take`` nearest
        concept keys and their cosines, nearest first: every key scored (exact) or, in a
        namespace with a ready approximate index, its candidates scored from the matrix. The
        index looks at ``expansion`` candidates (``keyann``: a search's, or a write's
        lookup's)."""
        n = len(self.ids)
        if n == 0 or take <= 0:
            return [Nearest(np.zeros(0, dtype=np.intp), np.zeros(0, np.float32)) for _ in vectors]
        approximate = self.approximate
        if approximate is not None and approximate.ready():
            keys = approximate.keys
            assert keys is not None
            # the keys waiting for their insert, scored exactly: nothing to pay while none waits
            unsettled_ids, unsettled = self._unsettled_rows() if self.unsettled else (None, None)
            unsettled_cosines = None if unsettled is None else unsettled @ vectors.T  # (keys, m)
            found = []
            for column, (vector, ids) in enumerate(
                zip(vectors, keys.search(vectors, candidates_for(take), expansion), strict=True)
            ):
                rows = np.array([self.pos[k] for k in ids], dtype=np.intp)
                cosines = self.matrix[rows].astype(np.float32, copy=False) @ vector
                if unsettled_ids is not None and unsettled_cosines is not None:
                    rows = np.concatenate([rows, unsettled_ids])
                    cosines = np.concatenate([cosines, unsettled_cosines[:, column]])
                found.append(Nearest.best(rows, cosines, take))
            return found
        sims = np.where(self.concept_mask[:n, None], self.matrix[:n] @ vectors.T, -np.inf)
        rows = np.arange(n)
        found = []
        for column in sims.T:
            if take < n:
                part = np.argpartition(-column, take - 1)[:take]
                found.append(Nearest.best(part, column[part], take))
            else:
                found.append(Nearest.best(rows, column, take))
        return found

    def _unsettled_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The unsettled keys' rows and their vectors as one matrix (kept until they change)."""
        if self._unsettled_matrix is None:
            self._unsettled_matrix = list(self.unsettled), np.stack(list(self.unsettled.values()))
        ids, matrix = self._unsettled_matrix
        # rows move when another key is removed: read them now
        return np.array([self.pos[k] for k in ids], dtype=np.intp), matrix

    def best_concept(
        self, vector: np.ndarray, exclude: set[str] | None = None
    ) -> tuple[str, float] | None:
        """The concept key closest to ``vector`` (optionally skipping some ids): the lookup a
        write makes for a key it coins, at the approximate index's ``LOOKUP_EXPANSION``; made
        already when a batch looked it up ahead."""
        skip = exclude or set()
        if not skip and self.ahead is not None:
            ahead = self.ahead.get(vector.tobytes(), NOT_AHEAD)
            if ahead is not NOT_AHEAD:
                return self._best_since(vector, ahead)
        (nearest,) = self.nearest_concepts(vector[None, :], 1 + len(skip), LOOKUP_EXPANSION)
        for row, cosine in zip(nearest.rows.tolist(), nearest.cosines.tolist(), strict=True):
            if self.ids[row] not in skip:
                return self.ids[row], cosine
        return None

    def look_ahead(self, vectors: np.ndarray) -> None:
        """Make the ``best_concept`` lookups of ``vectors`` (m, dim; unit length: the keys a
        batch may coin) now, in one call, until ``end_look_ahead``. An exact scan reads the
        whole matrix once a call (20 MB at 10k keys: ~2 ms a lookup, where one product for a
        batch's hundred costs about as much as one), and the approximate index answers a
        batch in one call. A lookup made ahead is then weighed only against the concept keys
        added since; removing a key or changing its type ends them all."""
        found = [
            near
            for start in range(0, len(vectors), LOOK_AHEAD_VECTORS)
            for near in self.nearest_concepts(
                vectors[start : start + LOOK_AHEAD_VECTORS], 1, LOOKUP_EXPANSION
            )
        ]
        self.ahead = {
            vector.tobytes(): (self.ids[int(near.rows[0])], float(near.cosines[0]))
            if len(near.rows)
            else None
            for vector, near in zip(vectors, found, strict=True)
        }
        self.added_since = []

    def end_look_ahead(self) -> None:
        self.ahead = None
        self.added_since = []

    def _best_since(
        self, vector: np.ndarray, best: tuple[str, float] | None
    ) -> tuple[str, float] | None:
        """``best``, a lookup made ahead, or a concept key added since that is closer (every one
        is still a concept key: a removal or a change of type ends the lookups made ahead)."""
        for key_id, added in self.added_since:
            cosine = float(added @ vector)
            if best is None or cosine > best[1]:
                best = key_id, cosine
        return best


def _same(text: str, held: str) -> str:
    """``held`` when it equals ``text``: one string object serves both dictionaries and the
    key's record (~60 bytes a key: a lower-case concept is its own literal and exact form)."""
    return held if text == held else text


class Nearest(NamedTuple):
    """Rows of a ``KeyIndex`` and their cosines to one query vector, nearest first."""

    rows: np.ndarray
    cosines: np.ndarray

    @classmethod
    def best(cls, rows: np.ndarray, cosines: np.ndarray, take: int) -> Nearest:
        """The ``take`` highest finite ``cosines`` (non-concept rows score -inf)."""
        keep = np.isfinite(cosines)
        rows, cosines = rows[keep], cosines[keep]
        order = np.argsort(-cosines, kind="stable")[:take]
        return cls(rows[order], cosines[order].astype(np.float32))
