"""One namespace's keys as a float32 matrix plus literal-surface dictionaries.

Cosine against every key of a namespace is one matrix-vector product (vectors are stored
L2-normalised). Rows are appended into spare capacity and removed by swapping the last row in,
so writes cost O(dim), not a rebuild.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

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

    def add_surface(self, key_id: str, surface: str) -> None:
        norm = surface_norm(surface)
        if norm:
            self.literal.setdefault(norm, set()).add(key_id)
        self.exact.setdefault(surface.strip().lower(), key_id)

    def remove(self, key: KeyRecord) -> None:
        index = self.pos.pop(key.id)
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
        self.concept_mask[self.pos[key.id]] = not key.is_entity

    def set_vector(self, key_id: str, vector: np.ndarray) -> None:
        self.matrix[self.pos[key_id]] = vector

    def cosines(self, vectors: np.ndarray) -> np.ndarray:
        """(n_keys,) for one vector, (n_keys, m) for an (m, dim) batch."""
        live = self.matrix[: len(self.ids)]
        product: np.ndarray = live @ vectors.T if vectors.ndim == 2 else live @ vectors
        return product

    def best_concept(
        self, vector: np.ndarray, exclude: set[str] | None = None
    ) -> tuple[str, float] | None:
        """The concept key closest to ``vector`` (optionally skipping some ids)."""
        n = len(self.ids)
        if n == 0:
            return None
        sims = np.where(self.concept_mask[:n], self.cosines(vector), -np.inf)
        if exclude:
            for key_id in exclude:
                index = self.pos.get(key_id)
                if index is not None:
                    sims[index] = -np.inf
        best = int(np.argmax(sims))
        if not np.isfinite(sims[best]):
            return None
        return self.ids[best], float(sims[best])
