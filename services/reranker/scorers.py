"""How (query, passage) relevance is scored, and the offline default that needs no download.

Every scorer labels its numbers with a ``score_kind``: a cross-encoder logit (unbounded, ~-10
to +10) and an embedding cosine (-1..1) must never be compared or gated with one threshold.
The offline default embeds the query and passages with the configured embedding model (USE-m
unless told otherwise) and scores by cosine; passage vectors are cached, because the same
memories come back in pool after pool, and kept on disk (``passages.PassageStore``), because
a restart would otherwise make every pool cold again.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Protocol

import numpy as np

from keymem.protocol.limits import PASSAGE_HEAD_CHARS
from keymem.services.embedder.backends import EmbeddingBackend, Encoded, Kind, fingerprint
from keymem.services.embedder.cache import Cached, VectorCache
from keymem.services.reranker.passages import PassageStore

log = logging.getLogger("keymem.reranker")


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


# USE-m costs ~20 µs per character, so the cosine default reads the head of a passage (where a
# paragraph's topic is) and, in a longer one, at most one more window: the one holding more of
# the query's words than the head does (where a long transcript mentions the detail asked
# about). A pool of 30 long memories then costs 30 heads (warmed when they are written) and at
# most 30 windows cold, not 30 whole transcripts; windows are cached like heads.
COSINE_HEAD_CHARS = PASSAGE_HEAD_CHARS
COSINE_WINDOW_CHARS = 600
COSINE_READ_CHARS = 20_000  # the graph's content limit: beyond it a passage is cut (and said so)
_WORD = re.compile(r"\w{3,}")
# Queries whose vectors ``RecentQueries`` keeps: a search's calls for its query come within
# milliseconds of each other, so a few cover every search in flight.
RECENT_QUERIES = 16


# A sentence ends at a terminator followed by space, or at a line break (a long query's
# segments are cut the same way, services/memory/search.py); it asks when it ends with "?".
SENTENCE_END = re.compile(r"(?<=[.!?。？！])\s+|\n+")
QUESTION_MARKS = ("?", "？")


def stated(text: str) -> str:
    """What a passage states: its sentences that are not questions, or the whole text when it
    holds no other (a question is all it has to be read by).

    A question in a memory asks; nothing an answer could come from is in it. The cosine reads
    the interrogative form as likeness, so a question scores high against a question about the
    same person — over raw dialogue turns "Melanie: Wow, what an experience! How did it make
    you feel?" outranked the turn telling of the museum visit asked about."""
    if not any(mark in text for mark in QUESTION_MARKS):  # most memories: no split on a search
        return text
    sentences = [part for part in SENTENCE_END.split(text) if part.strip()]
    statements = [part for part in sentences if not part.rstrip().endswith(QUESTION_MARKS)]
    if len(statements) == len(sentences) or not statements:
        return text
    return " ".join(statements)


def cosine_head(passage: str) -> str:
    """The part of a passage every query reads (``COSINE_HEAD_CHARS``), as stated."""
    return stated(passage[:COSINE_HEAD_CHARS])


def windows(text: str) -> list[str]:
    """``text`` in consecutive windows of at most ``COSINE_WINDOW_CHARS``, cut at spaces."""
    parts = []
    rest = text
    while len(rest) > COSINE_WINDOW_CHARS:
        cut_at = rest.rfind(" ", COSINE_WINDOW_CHARS // 2, COSINE_WINDOW_CHARS)
        cut_at = COSINE_WINDOW_CHARS if cut_at < 0 else cut_at
        parts.append(rest[:cut_at])
        rest = rest[cut_at:].lstrip()
    if rest:
        parts.append(rest)
    return parts


def read_windows(query: str, passage: str) -> list[str]:
    """What of ``passage`` is scored against ``query``: its head, and the window past the head
    holding the most of the query's words, if it holds more than the head does; each as
    stated (``stated``)."""
    head = passage[:COSINE_HEAD_CHARS]
    if len(passage) <= COSINE_HEAD_CHARS:
        return [stated(head)]
    wanted = {w.lower() for w in _WORD.findall(query)}

    def shared(text: str) -> int:
        return len(wanted & {w.lower() for w in _WORD.findall(text)})

    rest = windows(passage[COSINE_HEAD_CHARS:])
    best = max(rest, key=shared)
    return [stated(head), stated(best)] if shared(best) > shared(head) else [stated(head)]


class RecentQueries:
    """A backend that keeps the vectors of the last ``RECENT_QUERIES`` queries it embedded
    alone, so a search's query is embedded once: the reranker reads a pool larger than one
    call's ``RERANK_MAX_PASSAGES`` (the default pool's passages and their ``about``
    readings) in several calls with the same query, and where the embedder and the reranker
    share this backend (services/shared_model.py) the reranker reads the vector the embedder
    made for the search's analysis. Only a query embedded alone is kept and served, so a
    vector is always the one embedding it alone gives. Safe from several threads.
    """

    def __init__(self, backend: EmbeddingBackend) -> None:
        self.backend = backend
        self.name, self.model, self.variant = backend.name, backend.model, backend.variant
        self.dim, self.max_chars = backend.dim, backend.max_chars
        self._recent = VectorCache(RECENT_QUERIES)  # the embedder's LRU, here under a lock
        self._lock = threading.Lock()

    def encode(self, texts: list[str], kind: Kind) -> Encoded:
        if kind != "query" or len(texts) != 1:
            return self.backend.encode(texts, kind)
        with self._lock:
            found = self._recent.get(kind, texts[0])
        if found is not None:
            return Encoded(
                found.vector[None, :], frozenset({0}) if found.truncated else frozenset()
            )
        encoded = self.backend.encode(texts, kind)
        encoded.vectors.setflags(write=False)  # handed to every caller of this query
        with self._lock:
            self._recent.put(kind, texts[0], Cached(encoded.vectors[0], 0 in encoded.truncated))
        return encoded


class EmbeddingCosineScorer:
    score_kind = "embedding_cosine"
    max_chars = COSINE_READ_CHARS

    def __init__(
        self, backend: EmbeddingBackend, cache_entries: int, store: PassageStore | None = None
    ) -> None:
        self.backend = backend if isinstance(backend, RecentQueries) else RecentQueries(backend)
        self.model = fingerprint(backend)
        self.cache = VectorCache(cache_entries)
        self.store = store
        # Texts read from the cache whose rows are known to be in the store's current
        # generation (``_kept_in``): a read from the cache is a read, so a row the cache serves
        # is copied into the generation that keeps it once (passages.py).
        self._kept: set[str] = set()
        self._kept_in = store.generation if store is not None else 0

    def _rows(self, texts: list[str]) -> tuple[dict[str, Cached], int]:
        """A vector for every text: from the cache, else the store, else embedded (the missing
        ones in one call, then kept in both); and how many were embedded."""
        rows: dict[str, Cached] = {}
        missing: dict[str, None] = {}
        unkept: dict[str, Cached] = {}
        for text in texts:
            found = self.cache.get("passage", text)
            if found is None:
                missing[text] = None
            else:
                rows[text] = found
                if text not in self._kept:
                    unkept[text] = found
        stored = self._stored(list(missing))
        for text, entry in stored.items():
            rows[text] = entry
            self.cache.put("passage", text, entry)
            del missing[text]
        embedded = {}
        if missing:
            fresh = list(missing)
            encoded = self.backend.encode(fresh, "passage")
            # what the store keeps, so a vector scores the same embedded now or read back
            vectors = encoded.vectors.astype(np.float16).astype(np.float32)
            for i, text in enumerate(fresh):
                embedded[text] = rows[text] = Cached(vectors[i], i in encoded.truncated)
                self.cache.put("passage", text, embedded[text])
        self._keep(unkept | embedded, stored)
        return rows, len(missing)

    def _stored(self, texts: list[str]) -> dict[str, Cached]:
        store = self.store
        if store is None or not texts:
            return {}
        try:
            return store.get_many(texts)
        except OSError as exc:
            self._drop_store(store, exc)
            return {}

    def _keep(self, entries: dict[str, Cached], stored: dict[str, Cached]) -> None:
        """Add ``entries`` to the store (those its current generation lacks), and note which
        texts it now holds there: these and the ``stored`` just read (or copied) from it."""
        store = self.store
        if store is None or not (entries or stored):
            return
        try:
            store.add(entries)
        except OSError as exc:
            self._drop_store(store, exc)
            return
        if store.generation != self._kept_in:  # ended meanwhile: what it held is previous
            self._kept.clear()
            self._kept_in = store.generation
        elif len(self._kept) + len(entries) + len(stored) <= self.cache.max_entries:
            self._kept.update(entries, stored)
        else:  # as many as the cache holds: start again (each text costs one look-up then)
            self._kept.clear()

    def close(self) -> None:
        """Let go of the passage store's files (its lock and two generations: five
        descriptors), as the worker stops."""
        if self.store is not None:
            self.store.close()
            self.store = None

    def _drop_store(self, store: PassageStore, exc: OSError) -> None:
        """A store that fails (a full disk, a removed directory) is left: scoring goes on."""
        log.warning("passage store left after an error, vectors kept in memory only: %s", exc)
        store.close()
        self.store = None

    def score(self, query: str, passages: list[str]) -> tuple[list[float], set[int]]:
        """A passage scores as its best window read (``read_windows``)."""
        read = [read_windows(query, p) for p in passages]
        rows, _ = self._rows([w for parts in read for w in parts])
        query_vector = self.backend.encode([query], "query").vectors[0]
        scores = [max(float(rows[w].vector @ query_vector) for w in parts) for parts in read]
        truncated = {i for i, parts in enumerate(read) if any(rows[w].truncated for w in parts)}
        return scores, truncated

    def warm(self, passages: list[str]) -> int:
        """The heads: what every query reads."""
        return self.head_vectors(passages)[1]

    def head_vectors(self, passages: list[str]) -> tuple[np.ndarray, int]:
        """The heads' vectors, one row each (cached: what every query reads), and how many
        were new."""
        heads = [cosine_head(p) for p in passages]
        rows, fresh = self._rows(heads)
        return np.stack([rows[head].vector for head in heads]).astype(np.float32), fresh
