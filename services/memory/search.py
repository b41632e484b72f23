"""Recall orchestration: the router's fan-out to embedder, lexicon, graph and reranker.

Hybrid search (the engine behind inject and ``keymem eval``):

1. analyse — the embedder's query vector, the lexicon's BM25 top 50 and the query's phrases
   embedded as keys (for matching the one-word auto-keys), in two rounds of parallel calls
   (``Search._analyse``);
2. graph — key matching, key→memory links, RRF with the BM25 list, depth and freshness factors
   and hops, in one call over the graph's in-memory state (``recall_candidates``);
3. rerank — the reranker scores the pool against the query; the final order blends every
   evidence the pool carries — BM25 and reranker relevance min–max normalised over the pool,
   key path and hops on their own specificity-weighted scale — and sums them, a hop lifting
   what it reaches at most to just below the memory it stepped from (``fuse_blend``,
   ``Fusion``; the ablation behind it: docs/RECALL.md);
4. evidence — a comparison question ("A or B", "둘 다", "비교") gets the best evidence for each
   named entity into the answer, not two passages about the same one.

Degrade, don't fail (invariant 5): without an embedder recall runs on literal keys and BM25,
without a lexicon on keys alone, without a reranker on the fused ranks; each case is reported
in ``degraded``. Without the graph there is nothing to answer from: a typed ``unavailable``.
Each stage gets a share of the caller's remaining time, so one hung service cannot eat the
whole deadline.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from math import inf
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import DeadlineExceeded, KeymemError
from keymem.protocol.fields import (
    body_of,
    only_fields,
    opt_bool,
    opt_int,
    opt_str,
    req_str,
)
from keymem.protocol.limits import (
    DEFAULT_BUDGET_MS,
    NAMESPACE_MAX_CHARS,
    PASSAGE_HEAD_CHARS,
    POOL_DEFAULT,
    POOL_MAX,
    QUERY_MAX_CHARS,
    RERANK_MAX_PASSAGES,
)
from keymem.protocol.worker import remaining_ms
from keymem.services.graph.hybrid import NAMED_MATCHES
from keymem.services.graph.matching import PHRASES_MAX
from keymem.services.graph.text import normalize_namespace
from keymem.services.reranker.scorers import SENTENCE_END

ANALYSE_SHARE = 0.4  # of the remaining time, for embedder + lexicon together
RERANK_SHARE = 0.5  # of what is left after the graph, for the reranker
RERANK_SEGMENT_CHARS = 600
MIN_SEGMENT_CHARS = 8
HEAD_SEGMENTS = 2
TAIL_SEGMENTS = 4
BM25_DEPTH = 50
TOP_K_DEFAULT = 8
TOP_K_MAX = 50
BM25_DEPTH_MAX = 1_000  # the lexicon's limit
SCORE_DIGITS = 6
SCORE_STEP = 10.0**-SCORE_DIGITS  # the smallest difference a reply's rounded score shows
# Scripts whose letters never appear in another's words: a question in one and a memory in
# another can share no word, and the text's cosine across them is weak.
SCRIPTS = {
    "latin": re.compile(r"[A-Za-z\u00c0-\u024f]"),
    "hangul": re.compile(r"[\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f]"),
    "kana": re.compile(r"[\u3040-\u30ff]"),
    "han": re.compile(r"[\u4e00-\u9fff]"),
    "cyrillic": re.compile(r"[\u0400-\u04ff]"),
}
LETTER = re.compile(r"[^\W\d_]")
# a letter of any other script than each of ``SCRIPTS`` (a search stops at the first)
OTHER_LETTER = {
    name: re.compile(rf"(?!{letters.pattern}){LETTER.pattern}") for name, letters in SCRIPTS.items()
}
# The most of a named passage its writer's name may take (``named_text``): a title or an
# agent's keys are a few words (the dev files' longest, 169 characters), and the content keeps
# at least three quarters of the head the reranker's cosine reads.
NAME_MAX_CHARS = PASSAGE_HEAD_CHARS // 4

# Comparison-shaped questions: evidence for each named entity, not the same one twice.
COMPARISON_PATTERN = re.compile(
    r"\bor\b|\bboth\b|\bcompare\b|\bcomparison\b|\bwhich (?:one|of)\b|\bthe same\b"
    r"|둘 다|비교|어느 쪽|どちら|比較",
    re.IGNORECASE,
)


@dataclass
class Timing:
    started: float = field(default_factory=time.perf_counter)
    stages_ms: dict[str, float] = field(default_factory=dict)
    _mark: float = field(default_factory=time.perf_counter)

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.stages_ms[stage] = round((now - self._mark) * 1000, 3)
        self._mark = now

    def report(self) -> dict[str, float]:
        return {**self.stages_ms, "total": round((time.perf_counter() - self.started) * 1000, 3)}


SCALES = ("floor", "pool")
# The units of specific evidence the ``floor`` scale never divides by less than: one literally
# named key on a single memory (key score 1 × IDF 1), and one hop step through a key on two
# memories (hop decay 0.3 × IDF 1/2), the most specific association two memories can share.
KEY_UNIT = 1.0
HOP_UNIT = 0.15


@dataclass(frozen=True)
class Fusion:
    """How ``Search`` blends the pool's evidence. The product runs the defaults; the recall
    ablation (``benchmarks/recall_ablation.py``) builds a ``Search`` with other values in
    process, so none of this travels on the wire.

    * ``key_weight``, ``dense_weight``, ``hop_weight`` — the weight of those evidences (BM25's
      is 1).
    * ``scale`` — how key path and hops enter the blend. ``floor`` (kept): each over the pool's
      largest, but never over less than one unit of specific evidence — for the key path
      (``key score × IDF × link weight``) one literally named key on a single memory (1), for a
      hop (``hop_share``: 0.3 × IDF × link weight per step) one step through a key on two
      memories (0.15). Strong evidence keeps its margins as under min–max, but a pool whose only
      key path or hop comes through a hub (IDF 1/n) keeps it small. ``pool``: min–max over the
      pool like BM25 and relevance (the build before), which makes whatever key path or hop the
      pool holds worth a whole unit — on agent-keyed stores, a person's name on every memory.
      Measured and not kept: the key path capped at 1 with the hop share as it is, over 0.15
      capped, or times its seed's blended evidence — each lost two-hop questions
      (docs/history/, recall on agent keys).
    * ``link_weighted`` — key and hop evidence count at their links' share of an agent's link.
    * ``hops_below_lender`` — a hop lifts what it reaches at most to just below the memory it
      stepped from (``below_lenders``).
    * ``about`` — the reranker also reads what a memory's writer said it is about (its
      agent-written keys or title joined, the graph's ``about``), and a memory is as relevant
      as the better of its two readings (``Relevance.best``).
    * ``cross_named`` — a candidate written in another script than the query, with a name
      from its writer (``about``), is read as its name over its text (``named_text``) where
      the text alone is read otherwise: across languages the text's cosine is weak, and the
      name and the text each carry part of the match. A pair in one script reads the text
      alone, as before (there the name dilutes a short text).
    * ``subjects`` — a memory about another person than the question names (its ``subject``,
      the person its text names first, is none of the question's literally named ``name``
      keys) gets no key or hop evidence (``about_others``).
    * ``evidence`` — comparison questions put one candidate per named entity first.
    * ``phrases`` — the query's own phrases are extracted and embedded for key matching.
    * ``bm25_depth`` — how many BM25 hits the lexicon hands the graph.
    """

    key_weight: float = 1.0
    dense_weight: float = 1.0
    hop_weight: float = 1.0
    scale: str = "floor"
    link_weighted: bool = True
    hops_below_lender: bool = True
    about: bool = True
    cross_named: bool = True
    subjects: bool = True
    evidence: bool = True
    phrases: bool = True
    bm25_depth: int = BM25_DEPTH


# Inject's candidates: its gate judges whom a memory is about on its own (``other_entity``),
# and its premise check needs another person's memory of the asked fact among the candidates
# to silence the prompt, so inject's search lends that memory the key and hop evidence that
# ranks it (with the subject rule: locomo_agentkeys inject not-found 0.865 -> 0.852).
GATED_FUSION = Fusion(subjects=False)

SEARCH_FIELDS = ("query", "namespace", "top_k", "hops", "pool", "rerank", "timing", "min_seq")


@dataclass(frozen=True)
class SearchRequest:
    query: str
    namespace: str
    top_k: int
    hops: int
    pool: int
    rerank: bool
    timing: bool
    min_seq: int | None

    @classmethod
    def parse(cls, body: Any, *, top_k_default: int = TOP_K_DEFAULT) -> SearchRequest:
        body = body_of(body)
        only_fields(body, SEARCH_FIELDS, "search")  # no experiment knobs: see ``Fusion``
        query = req_str(body, "query", QUERY_MAX_CHARS)
        namespace = opt_str(body, "namespace", NAMESPACE_MAX_CHARS)
        return cls(
            query=query,
            namespace=normalize_namespace(namespace),
            top_k=opt_int(body, "top_k", top_k_default, 1, TOP_K_MAX),
            hops=opt_int(body, "hops", 2, 0, 5),
            pool=opt_int(body, "pool", POOL_DEFAULT, 1, POOL_MAX),
            rerank=opt_bool(body, "rerank", True),
            timing=opt_bool(body, "timing", False),
            min_seq=opt_int(body, "min_seq", 0, 0, 2**62) or None,
        )


def rerank_segments(query: str) -> list[str]:
    """What the reranker compares passages with: the query, or sentences of a long one.

    A long prompt is mostly pasted material with the question somewhere, usually at an end;
    scored whole, the question drowns (a 4,000-character log scores ~0 against the memory it
    asks about). So a long query is cut into distinct sentences and the first and last few are
    scored separately; a passage keeps its best score.
    """
    if len(query) <= RERANK_SEGMENT_CHARS:
        return [query]
    sentences = list(
        dict.fromkeys(
            part.strip()[:RERANK_SEGMENT_CHARS]
            for part in SENTENCE_END.split(query)
            if len(part.strip()) >= MIN_SEGMENT_CHARS
        )
    )
    if len(sentences) <= HEAD_SEGMENTS + TAIL_SEGMENTS:
        return sentences or [query[:RERANK_SEGMENT_CHARS]]
    return sentences[:HEAD_SEGMENTS] + sentences[-TAIL_SEGMENTS:]


def is_comparison(query: str) -> bool:
    return COMPARISON_PATTERN.search(query) is not None


class Search:
    def __init__(self, client: Client, fusion: Fusion | None = None) -> None:
        self.client = client
        self.fusion = fusion or Fusion()

    def search(self, body: Any) -> dict[str, Any]:
        return self.search_all([SearchRequest.parse(body)])[0]

    def search_all(self, requests: list[SearchRequest]) -> list[dict[str, Any]]:
        """One query searched in several namespaces (inject's): the query is analysed once,
        and the namespaces' graph and reranker calls run in parallel."""
        timing = Timing()
        first = requests[0]
        degraded: dict[str, str] = {}
        vector, bm25, phrases = self._analyse(requests, degraded)
        timing.lap("analyse")
        calls: list[tuple[str, str, Any]] = []
        for request in requests:
            graph_body: dict[str, Any] = {
                "namespace": request.namespace,
                "text": request.query,
                "bm25": bm25[request.namespace],
                "hops": request.hops,
                "pool": request.pool,
            }
            if vector is not None:
                graph_body["vector"] = vector
            if phrases is not None:
                graph_body["phrase_vectors"] = phrases
            calls.append(("graph", "recall_candidates", graph_body))
        outcomes = self.client.call_many(calls, timeout_ms=remaining_ms(DEFAULT_BUDGET_MS))
        for outcome in outcomes:
            if isinstance(outcome, KeymemError):
                raise outcome
        timing.lap("graph")
        pools: list[list[dict[str, Any]]] = [found["candidates"] for found in outcomes]
        relevances: list[Relevance | None] = [None] * len(pools)
        if first.rerank and any(pools):
            relevances = self._relevance(first.query, pools, degraded)
        elif not first.rerank:
            degraded["reranker"] = "disabled for this request"
        replies = []
        for request, found, pool, relevance in zip(
            requests, outcomes, pools, relevances, strict=True
        ):
            candidates = fuse_blend(pool, relevance, self.fusion, named_persons(found["keys"]))
            if self.fusion.evidence and is_comparison(request.query):
                candidates = select_evidence(candidates, found["keys"], request.top_k)
            memories = candidates[: request.top_k]
            replies.append(
                {
                    "status": "found" if memories else "no_match",
                    "query": request.query,
                    "namespace": found["namespace"],
                    "memories": memories,
                    "keys": [key_summary(k) for k in found["keys"]],
                    "anchor": found["anchor"],
                    "degraded": dict(degraded),
                }
            )
        timing.lap("rerank")
        if first.timing:
            for reply in replies:
                reply["timing_ms"] = timing.report()
        return replies

    def _analyse(
        self, requests: list[SearchRequest], degraded: dict[str, str]
    ) -> tuple[Any, dict[str, list[dict[str, Any]]], Any]:
        """The query vector, the BM25 hits per namespace and the vectors of the query's own
        phrases (``Fusion.phrases``); any may be missing.

        Two rounds of parallel calls: the query's embedding with the lexicon's phrases of the
        query, then BM25 with the phrases' embedding (as keys: the embedder's cache serves
        repeated words). The lexicon serves one request at a time, so its two calls follow
        each other whatever their order; with the phrases first, their embedding runs while
        BM25 does, and BM25 (the long leg in a large store) ends the stage alone.
        """
        request = requests[0]
        budget = int(remaining_ms(DEFAULT_BUDGET_MS) * ANALYSE_SHARE)
        started = time.perf_counter()
        searches: list[tuple[str, str, Any]] = []
        for each in requests:
            lexicon_body: dict[str, Any] = {
                "query": each.query,
                "namespace": each.namespace,
                "top_n": self.fusion.bm25_depth,
            }
            if each.min_seq is not None:
                lexicon_body["min_seq"] = each.min_seq
            searches.append(("lexicon", "search", lexicon_body))
        embed = ("embedder", "embed", {"texts": [request.query], "kind": "query"})
        first: list[tuple[str, str, Any]] = [embed]
        if self.fusion.phrases:
            phrase_body = {"text": request.query, "limit": PHRASES_MAX, "content_words": True}
            first.append(("lexicon", "extract_keys", phrase_body))
        else:
            first += searches
        outcomes = self.client.call_many(first, timeout_ms=budget)
        embedded = outcomes[0]
        vector = None
        if isinstance(embedded, KeymemError):
            degraded["embedder"] = str(embedded)
        else:
            vector = embedded["vectors"][0]
        phrases = None
        if self.fusion.phrases:
            extracted = outcomes[1]
            texts = []
            if vector is not None and not isinstance(extracted, KeymemError):
                texts = [c["key"] for c in extracted["keys"]]
            second = list(searches)
            if texts:
                second.append(("embedder", "embed", {"texts": texts, "kind": "key"}))
            left = budget - int((time.perf_counter() - started) * 1000)
            if left > 0:
                outcomes = self.client.call_many(second, timeout_ms=left)
            else:
                late = DeadlineExceeded(f"the analysis took its {budget} ms before BM25")
                outcomes = [late] * len(second)
            if texts:
                found = outcomes[-1]
                if isinstance(found, KeymemError):  # the whole query's vector still matches
                    degraded["phrases"] = str(found)
                else:
                    phrases = found["vectors"]
            lexical = outcomes[: len(requests)]
        else:
            lexical = outcomes[1:]
        bm25: dict[str, list[dict[str, Any]]] = {}
        for each, hits in zip(requests, lexical, strict=True):
            if isinstance(hits, KeymemError):
                degraded["lexicon"] = str(hits)
                bm25[each.namespace] = []
            else:
                bm25[each.namespace] = hits["hits"]
        return vector, bm25, phrases

    def _relevance(
        self, query: str, pools: list[list[dict[str, Any]]], degraded: dict[str, str]
    ) -> list[Relevance | None]:
        """The reranker's score of every candidate of every pool against the query (parallel
        calls, at most ``RERANK_MAX_PASSAGES`` passages each), and in the same calls of every
        candidate's ``about`` (``Fusion.about``); all None if it is down. For a candidate in
        another script than the query, its text as named (``Fusion.cross_named``) in calls of
        their own, sent last: the idle-time warm-up embeds a memory's text, not its named text,
        so a first cross-script question can find every named passage cold; one not back within
        the reranker's share is not read and the text stands, as if it had not been named."""
        budget = int(remaining_ms(DEFAULT_BUDGET_MS) * RERANK_SHARE)
        candidates = [c for pool in pools for c in pool]
        contents = [c["content"] for c in candidates]
        abouts = [c.get("about") for c in candidates] if self.fusion.about else []
        read_about = [i for i, about in enumerate(abouts) if about]
        read_named = named_readings(query, candidates) if self.fusion.cross_named else []
        texts = contents + [abouts[i] for i in read_about]
        named_passages = [named_text(candidates[i]["about"], contents[i]) for i in read_named]
        segments = rerank_segments(query)
        text_calls = _score_calls(segments, texts)
        outcomes = self.client.call_many(
            text_calls + _score_calls(segments, named_passages), timeout_ms=budget
        )
        best, kind = _best_over_segments(outcomes[: len(text_calls)], len(segments), len(texts))
        if best is None:
            degraded["reranker"] = str(next(o for o in outcomes if isinstance(o, KeymemError)))
            return [None] * len(pools)
        scores = best[: len(contents)]
        about: list[float | None] = [None] * len(contents)
        for at, i in enumerate(read_about):
            about[i] = best[len(contents) + at]
        named: list[float | None] = [None] * len(contents)
        named_best, _ = _best_over_segments(
            outcomes[len(text_calls) :], len(segments), len(named_passages)
        )
        if named_best is not None:
            for at, i in enumerate(read_named):
                named[i] = named_best[at]
        relevances: list[Relevance | None] = []
        at = 0
        for pool in pools:
            end = at + len(pool)
            if pool:
                relevances.append(Relevance(scores[at:end], kind, about[at:end], named[at:end]))
            else:
                relevances.append(None)
            at = end
        return relevances


def _score_calls(segments: list[str], passages: list[str]) -> list[tuple[str, str, Any]]:
    """``reranker.score`` of ``passages`` against each segment, at most
    ``RERANK_MAX_PASSAGES`` a call, segment by segment."""
    return [
        (
            "reranker",
            "score",
            {"query": segment, "passages": passages[at : at + RERANK_MAX_PASSAGES]},
        )
        for segment in segments
        for at in range(0, len(passages), RERANK_MAX_PASSAGES)
    ]


def _best_over_segments(
    outcomes: list[Any], segments: int, passages: int
) -> tuple[list[float] | None, str]:
    """Each passage's best score over the segments whose every call came back (a passage is
    as relevant as its best match with any part of the query), and the scores' kind; None
    when no segment's did."""
    per_segment = len(outcomes) // segments
    rows, kind = [], ""
    for n in range(segments):
        parts = outcomes[n * per_segment : (n + 1) * per_segment]
        if all(not isinstance(o, KeymemError) for o in parts):
            rows.append([x for o in parts for x in o["scores"]])
            kind = str(parts[0]["score_kind"]) if parts else kind
    if not rows:
        return None, kind
    return [max(row[i] for row in rows) for i in range(passages)], kind


def main_script(text: str) -> str | None:
    """The one of ``SCRIPTS`` most of the text's letters are written in; None for none."""
    counts = {name: len(letters.findall(text)) for name, letters in SCRIPTS.items()}
    script = max(counts, key=counts.__getitem__)
    return script if counts[script] else None


def crosses_script(script: str, content: str) -> bool:
    """The text is mostly written in another script than ``script`` (the query's): fewer than
    half the letters of its head, the part the reranker's cosine reads first, are in it."""
    head = content[:PASSAGE_HEAD_CHARS]
    # one search each settles a head in one script (every pool on a one-language store): the
    # counts cost ~0.15 ms a head, ~17 ms over a 1M pool of keyed memories, on every search
    if not SCRIPTS[script].search(head):
        return LETTER.search(head) is not None
    if not OTHER_LETTER[script].search(head):
        return False
    return 2 * len(SCRIPTS[script].findall(head)) < len(LETTER.findall(head))


def named_readings(query: str, candidates: list[dict[str, Any]]) -> list[int]:
    """Which candidates the reranker reads as named (``named_text``) for ``query``: those its
    writer named (an ``about``) whose text is in another script than the query. Search and
    navigation read the same ones."""
    script = main_script(query)
    if script is None:
        return []
    return [
        i
        for i, c in enumerate(candidates)
        if c.get("about") and crosses_script(script, c["content"])
    ]


def named_text(about: str | None, content: str) -> str:
    """A memory as its writer named it: its ``about`` (at most ``NAME_MAX_CHARS``) on the
    first line, then its text, as a flat index reads a document's title with its content
    (services/evaluation/dataset.py); the text alone when its writer gave it no name."""
    return f"{about[:NAME_MAX_CHARS]}\n{content}" if about else content


@dataclass(frozen=True)
class Relevance:
    """The reranker's verdict on a pool, in pool order, and what kind of score it is."""

    scores: list[float]
    kind: str
    # the reranker's score of each candidate's ``about`` (None: not read), pool order
    about: list[float | None] = field(default_factory=list)
    # the score of each candidate's text as named (``named_text``; None: not read), read in
    # place of its text where question and memory are in different scripts
    named: list[float | None] = field(default_factory=list)

    def best(self) -> list[float]:
        """Each candidate's relevance as the better of its two readings: its text (as named,
        across scripts), and what its writer said it is about. A reading that does not fit the
        query costs nothing."""
        about = self.about or [None] * len(self.scores)
        named = self.named or [None] * len(self.scores)
        return [
            max(s if n is None else n, -inf if a is None else a)
            for s, a, n in zip(self.scores, about, named, strict=True)
        ]

    def labelled(
        self, candidate: dict[str, Any], i: int, score: float, kind: str
    ) -> dict[str, Any]:
        return {
            **candidate,
            "graph_score": candidate["score"],
            "score": round(score, SCORE_DIGITS),
            "score_kind": kind,
            "rerank_score": round(self.scores[i], SCORE_DIGITS),
            "rerank_kind": self.kind,
        }


def _ordered(
    candidates: list[dict[str, Any]], relevance: Relevance | None, scored: list[tuple[float, int]]
) -> list[dict[str, Any]]:
    """Candidates relabelled with their fused score, best first (ties: the reranker's choice)."""
    if relevance is None:
        plain = [
            {
                **candidates[i],
                "graph_score": candidates[i]["score"],
                "score": round(v, SCORE_DIGITS),
                "score_kind": BLEND_KIND,
            }
            for v, i in scored
        ]
        plain.sort(key=lambda c: -c["score"])
        return plain
    fused = [relevance.labelled(candidates[i], i, v, BLEND_KIND) for v, i in scored]
    fused.sort(key=lambda c: (-c["score"], -c["rerank_score"]))
    return fused


def floored(values: list[float], unit: float) -> list[float]:
    """Values over the pool's largest, but never over less than ``unit``: the pool's best
    evidence counts whole only when it is at least one unit's worth, so a pool whose only key
    or hop evidence comes through a hub keeps it small (min-max would make it whole)."""
    top = max(max(values, default=0.0), unit)
    return [v / top for v in values]


def min_max(values: list[float]) -> list[float]:
    """Values mapped onto [0, 1] by the pool's own range (all 0 when they are all equal)."""
    low, high = min(values, default=0.0), max(values, default=0.0)
    if high <= low:
        return [0.0] * len(values)
    return [(v - low) / (high - low) for v in values]


BLEND_KIND = "blended_evidence"  # key path + BM25 + relevance + hops, each on a unit scale


def fuse_blend(
    candidates: list[dict[str, Any]],
    relevance: Relevance | None,
    fusion: Fusion,
    persons: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """Score blending: each evidence on a scale of about one, weighted and summed.

    BM25 and the reranker's relevance are min–max normalised over the pool: their raw scales
    mean nothing across queries. Why not RRF: in a small pool RRF mostly counts list
    *membership* (1/61 vs 1/70 separates rank 1 from rank 10, being listed at all is worth
    1/61), so a thresholded list decides the order regardless of how strong its evidence is,
    and a weak reranker gets half the say whatever its scores; normalised scores keep the
    margins (the convex combination that beat RRF in Bruch et al., "An Analysis of Fusion
    Functions for Hybrid Retrieval", 2023).

    Key path and hops keep a scale of their own (``Fusion.scale``, ``floored``): the graph's
    evidence is specificity-weighted already (IDF 1/n per key), so the pool's best counts a
    whole unit only when it is at least one specific key's (or one pair step's) worth — a
    memory reached only through a hub counts next to nothing instead of a whole unit. Depth
    and freshness scale the sum as they scale the graph's own fusion. A memory about another
    person than the question's ``persons`` has neither (``Fusion.subjects``, ``about_others``).
    """
    parts = [c["components"] for c in candidates]
    bm25 = min_max([p.get("bm25_score", 0.0) for p in parts])
    dense = min_max(relevance.best()) if relevance is not None else [0.0] * len(candidates)
    others = about_others(candidates, persons) if fusion.subjects else set()
    associated = [{} if i in others else p for i, p in enumerate(parts)]
    if fusion.scale == "pool":
        key = min_max([p.get("key_path", 0.0) for p in associated])
        hop = min_max([p.get("hop_score", 0.0) for p in associated])
    else:
        key = floored([p.get("key_path", 0.0) for p in associated], KEY_UNIT)
        hop = floored([p.get("hop_share", 0.0) for p in associated], HOP_UNIT)
    key_links = [_link_share(p, "key_link", fusion) for p in parts]
    hop_links = [_link_share(p, "hop_link", fusion) for p in parts]
    direct, lent = [], []
    for i, p in enumerate(parts):
        score = fusion.key_weight * key[i] * key_links[i] + bm25[i]
        score += fusion.dense_weight * dense[i]
        direct.append(score * p.get("factor", 1.0))
        lent.append(fusion.hop_weight * hop[i] * hop_links[i] * p.get("factor", 1.0))
    if fusion.hops_below_lender:
        totals = below_lenders(candidates, direct, lent)
    else:
        totals = [d + h for d, h in zip(direct, lent, strict=True)]
    return _ordered(candidates, relevance, [(t, i) for i, t in enumerate(totals)])


def named_persons(keys: list[dict[str, Any]]) -> frozenset[str]:
    """The people a question names: its matched ``name`` keys whose concept or alias it
    spells out."""
    return frozenset(
        str(k["key_id"])
        for k in keys
        if k.get("key_type") == "name" and k.get("match_type") in NAMED_MATCHES
    )


def about_others(candidates: list[dict[str, Any]], persons: frozenset[str]) -> set[int]:
    """The candidates about another person than the question names: their ``subject`` (the
    person their text names first, from the graph) is none of ``persons``.

    Key path and hops say a memory is associated with the question's words ("Melanie's
    family" → "Caroline appreciates seeing Melanie's love for her family"); about another
    person, that association does not answer a question about this one, and on an
    agent-keyed store those memories took places in the top from the named person's own.
    Their BM25 and relevance still count: LoCoMo files a few answers under the other speaker
    (16 of the 784 gold memories in its pools)."""
    if not persons:
        return set()
    return {
        i
        for i, c in enumerate(candidates)
        if c.get("subject") is not None and c["subject"] not in persons
    }


def below_lenders(
    candidates: list[dict[str, Any]], direct: list[float], lent: list[float]
) -> list[float]:
    """Each candidate's direct evidence plus its hop's, the hop lifting it at most to just
    below the memory it stepped from (``components.hop_from``, when that is in the pool).

    A hop's evidence is lent: the walk passes on a share of its lender's, so it can say
    "related to the best match" but never "better than the best match". Added on its own
    scale it could (a neighbour through a key on two memories gets a whole unit its seed
    lacks), and on agent-keyed stores the seed's topical neighbours took the top places
    from the answer. What the hop reaches keeps its own direct evidence in full.
    """
    position = {c["memory_id"]: i for i, c in enumerate(candidates)}
    totals = list(direct)
    by_hop = sorted(
        (c["components"].get("hop", 0), i) for i, c in enumerate(candidates) if lent[i] > 0
    )
    for _, i in by_hop:  # a lender is settled before what it lends to (fewer hops)
        lender = position.get(candidates[i]["components"].get("hop_from"))
        lifted = direct[i] + lent[i]
        if lender is not None:
            lifted = min(lifted, totals[lender] - SCORE_STEP)
        totals[i] = max(direct[i], lifted)
    return totals


def _link_share(parts: dict[str, Any], name: str, fusion: Fusion) -> float:
    """How much of a key or hop evidence counts: the share of a default (agent's) link its
    links carry, at most all of it. Min–max normalisation erases the half weight the graph
    gives auto-keys; this puts it back."""
    if not fusion.link_weighted:
        return 1.0
    return min(1.0, float(parts.get(name, 1.0)))


def select_evidence(
    candidates: list[dict[str, Any]], keys: list[dict[str, Any]], top_k: int
) -> list[dict[str, Any]]:
    """Put the best candidate of each named entity first, then the rest in order.

    Named: a key whose concept or alias the query spells out (``NAMED_MATCHES``). A key one
    of the query's words merely lies near (``phrase``) names nothing: across scripts each
    English word of a question meets a Korean one-word auto-key, and "Person A or Person B"
    put those words' memories above the blend's best."""
    named = [k["key_id"] for k in keys if k.get("match_type") in NAMED_MATCHES]
    if len(named) < 2:
        return candidates
    chosen: list[dict[str, Any]] = []
    for key_id in named:
        best = next(
            (c for c in candidates if key_id in c["matched_keys"] and c not in chosen), None
        )
        if best is not None:
            chosen.append(best)
    if len(chosen) < 2:
        return candidates
    chosen = chosen[:top_k]
    return chosen + [c for c in candidates if c not in chosen]


def key_summary(key: dict[str, Any]) -> dict[str, Any]:
    return {
        name: key.get(name)
        for name in (
            "key_id",
            "concept",
            "aliases",
            "key_type",
            "namespace",
            "score",
            "match_type",
            "memory_count",
            "is_hub",
            "specificity",
        )
    }
