"""One namespace's keys as a float32 matrix plus literal-surface dictionaries.

Cosine against every key of a namespace is one matrix-vector product (vectors are stored
L2-normalised). Rows are appended into spare capacity and removed by swapping the last row in,
so writes cost O(dim), not a rebuild. A namespace with many concept keys also has an
approximate index (``keyann.py``), attached by ``keyann.KeyAnn`` and kept in step here: the
nearest concept keys then come from it, re-scored exactly from the matrix.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import numpy as np

from keymem.services.graph.keyann import Approximate, Snapshot, candidates_for
from keymem.services.graph.text import script_of, surface_norm
from keymem.store.records import KeyRecord

INITIAL_CAPACITY = 64


class KeyIndex:
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.ids: list[str] = []
        self.pos: dict[str, int] = {}
        self.matrix = np.zeros((INITIAL_CAPACITY, dim), dtype=np.float32)
        self.concept_mask = np.zeros(INITIAL_CAPACITY, dtype=bool)
        # surface_norm(concept or alias) -> key ids (literal matching of queries)
        self.literal: dict[str, set[str]] = {}
        # stripped lower-case concept or alias -> key id (exact key resolution on write)
        self.exact: dict[str, str] = {}
        # writing system -> keys whose concept is written in it (remember's language hint)
        self.scripts: Counter[str | None] = Counter()
        # the concept keys' approximate index, once the namespace is large (keyann.py)
        self.approximate: Approximate | None = None

    @classmethod
    def bulk(cls, dim: int, keys: list[KeyRecord]) -> KeyIndex:
        """An index over ``keys`` built in one go (start-up), with room to grow."""
        index = cls(dim)
        capacity = max(INITIAL_CAPACITY, 2 * len(keys))
        index.matrix = np.zeros((capacity, dim), dtype=np.float32)
        if keys:
            index.matrix[: len(keys)] = np.stack([k.vector for k in keys])
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
        if n == len(self.matrix):
            grown = np.zeros((2 * n, self.dim), dtype=np.float32)
            grown[:n] = self.matrix
            self.matrix = grown
            mask = np.zeros(2 * n, dtype=bool)
            mask[:n] = self.concept_mask
            self.concept_mask = mask
        self.matrix[n] = key.vector
        self.concept_mask[n] = not key.is_entity
        self.ids.append(key.id)
        self.pos[key.id] = n
        for surface in key.surfaces():
            self.add_surface(key.id, surface)
        self.scripts[script_of(key.concept)] += 1
        if self.approximate is not None and not key.is_entity:
            self.approximate.put(key.id, key.vector)

    def add_surface(self, key_id: str, surface: str) -> None:
        norm = surface_norm(surface)
        if norm:
            self.literal.setdefault(norm, set()).add(key_id)
        self.exact.setdefault(surface.strip().lower(), key_id)

    def remove(self, key: KeyRecord) -> None:
        index = self.pos.pop(key.id)
        if self.approximate is not None and self.concept_mask[index]:
            self.approximate.put(key.id, None)
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
            holders = self.literal.get(norm)
            if holders is not None:
                holders.discard(key.id)
                if not holders:
                    del self.literal[norm]
            exact = surface.strip().lower()
            if self.exact.get(exact) == key.id:
                del self.exact[exact]

    def set_entity(self, key: KeyRecord) -> None:
        row = self.pos[key.id]
        self.concept_mask[row] = not key.is_entity
        if self.approximate is not None:
            self.approximate.put(key.id, None if key.is_entity else self.matrix[row])

    def set_vector(self, key_id: str, vector: np.ndarray) -> None:
        row = self.pos[key_id]
        self.matrix[row] = vector
        if self.approximate is not None and self.concept_mask[row]:
            self.approximate.put(key_id, vector)

    def cosine(self, key_id: str, vector: np.ndarray) -> float:
        return float(self.matrix[self.pos[key_id]] @ vector)

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

    def nearest_concepts(self, vectors: np.ndarray, take: int) -> list[Nearest]:
        """For each row of ``vectors`` (m, dim; unit length) the rows of its ``take`` nearest
        concept keys and their cosines, nearest first: every key scored (exact) or, in a
        namespace with a ready approximate index, its candidates re-scored exactly."""
        n = len(self.ids)
        if n == 0 or take <= 0:
            return [Nearest(np.zeros(0, dtype=np.intp), np.zeros(0, np.float32)) for _ in vectors]
        approximate = self.approximate
        if approximate is not None and approximate.ready():
            assert approximate.keys is not None
            found = []
            for vector, ids in zip(
                vectors, approximate.keys.search(vectors, candidates_for(take)), strict=True
            ):
                rows = np.array([self.pos[k] for k in ids], dtype=np.intp)
                found.append(Nearest.best(rows, self.matrix[rows] @ vector, take))
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

    def best_concept(
        self, vector: np.ndarray, exclude: set[str] | None = None
    ) -> tuple[str, float] | None:
        """The concept key closest to ``vector`` (optionally skipping some ids)."""
        skip = exclude or set()
        (nearest,) = self.nearest_concepts(vector[None, :], 1 + len(skip))
        for row, cosine in zip(nearest.rows.tolist(), nearest.cosines.tolist(), strict=True):
            if self.ids[row] not in skip:
                return self.ids[row], cosine
        return None


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
