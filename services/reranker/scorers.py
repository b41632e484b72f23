"""How (query, passage) relevance is scored, and the offline default that needs no download.

Every scorer labels its numbers with a ``score_kind``: a cross-encoder logit (unbounded, ~-10
to +10) and an embedding cosine (-1..1) must never be compared or gated with one threshold.
The offline default embeds the query and passages with the configured embedding model (USE-m
unless told otherwise) and scores by cosine; passage vectors are cached, because the same
memories come back in pool after pool.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from services.embedder.backends import EmbeddingBackend, fingerprint
from services.embedder.cache import Cached, VectorCache


class Scorer(Protocol):
    score_kind: str
    model: str
    # Passages longer than this are cut by the service before scoring.
    max_chars: int

    def score(self, query: str, passages: list[str]) -> tuple[list[float], set[int]]:
        """One score per passage (higher is more relevant), and which passages it truncated."""
        ...

    def warm(self, passages: list[str]) -> int:
        """Precompute what scoring these passages later needs; how many were new."""
        ...


# The cosine default reads the head of each passage: USE-m costs ~20 µs per character, so a
# pool of 30 full paragraphs would cost 150 ms cold; the opening carries the topic.
COSINE_PASSAGE_CHARS = 1000


class EmbeddingCosineScorer:
    score_kind = "embedding_cosine"
    max_chars = COSINE_PASSAGE_CHARS

    def __init__(self, backend: EmbeddingBackend, cache_entries: int) -> None:
        self.backend = backend
        self.model = fingerprint(backend)
        self.cache = VectorCache(cache_entries)

    def _rows(self, passages: list[str]) -> tuple[dict[str, Cached], int]:
        """A cached vector for every passage, embedding the missing ones in one call."""
        rows: dict[str, Cached] = {}
        missing: dict[str, None] = {}
        for passage in passages:
            found = self.cache.get("passage", passage)
            if found is not None:
                rows[passage] = found
            else:
                missing[passage] = None
        if missing:
            texts = list(missing)
            encoded = self.backend.encode(texts, "passage")
            for i, passage in enumerate(texts):
                entry = Cached(encoded.vectors[i].copy(), i in encoded.truncated)
                rows[passage] = entry
                self.cache.put("passage", passage, entry)
        return rows, len(missing)

    def score(self, query: str, passages: list[str]) -> tuple[list[float], set[int]]:
        rows, _ = self._rows(passages)
        query_vector = self.backend.encode([query], "query").vectors[0]
        matrix = np.stack([rows[p].vector for p in passages])
        scores = (matrix @ query_vector).astype(float).tolist()
        return scores, {i for i, p in enumerate(passages) if rows[p].truncated}

    def warm(self, passages: list[str]) -> int:
        return self._rows(passages)[1]
