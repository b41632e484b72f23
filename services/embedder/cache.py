"""A bounded LRU of embedded texts: keys and queries repeat far more often than they change.

Entries are keyed by (kind, text) because a model with prefixes embeds a query and a passage
of the same text differently. Lookups and inserts happen on the worker's single serving
thread, so no lock.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Row = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Cached:
    vector: Row
    truncated: bool  # the backend cut this text at its token limit


class VectorCache:
    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], Cached] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, kind: str, text: str) -> Cached | None:
        found = self._entries.get((kind, text))
        if found is None:
            self.misses += 1
            return None
        self._entries.move_to_end((kind, text))
        self.hits += 1
        return found

    def put(self, kind: str, text: str, entry: Cached) -> None:
        if self.max_entries <= 0:
            return
        self._entries[(kind, text)] = entry
        self._entries.move_to_end((kind, text))
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
