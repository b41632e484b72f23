"""Graph primitives the router's recall composes: key match, adjacency, bounded expansion.

``match_keys`` scores one query vector against every key of a namespace with one matrix
product and adds literal concept/alias hits found by dictionary lookup of the query's word
n-grams. ``expand`` walks shared keys and related_to links breadth-first with the original's
hop decay and IDF damping, but bounded: at most ``per_key`` members of any key (the strongest
links) and the best ``per_hop`` memories carried into the next hop, so hub keys cannot blow up.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from keymem.protocol.errors import BadRequest
from keymem.protocol.fields import body_of, opt_bool, opt_int, opt_number
from keymem.protocol.limits import CONTENT_MAX_CHARS
from keymem.services.graph.feedback import RecallBuffer
from keymem.services.graph.keyindex import KeyIndex, Nearest
from keymem.services.graph.links import Strongest
from keymem.services.graph.profile import Thresholds
from keymem.services.graph.requests import id_list, namespace_of, opt_str
from keymem.services.graph.state import GraphState
from keymem.services.graph.text import is_short_concept, query_phrases, surface_norm
from keymem.services.graph.validity import freshness, freshness_factor
from keymem.services.graph.views import key_idf, key_view

MATCH_MAX_TOP_K = 50
# A query that matched no key remembers its nearest keys for alias learning (a near miss):
# at most this many, each within this share of the key-recall threshold (below it the key is
# no nearer the query than unrelated keys are).
NEAR_MISS_KEYS = 3
NEAR_MISS_SHARE = 0.6
HOP_DECAY = 0.3
EXPAND_LATER_HOP_FACTOR = 0.7  # hops >= 2 are multiplied by this on top of the decay
HOPS_MAX = 5
EXPAND_PER_HOP_DEFAULT = 20
EXPAND_PER_KEY_DEFAULT = 50
SCORE_DIGITS = 4


def query_vector(state: GraphState, body: dict[str, Any]) -> np.ndarray | None:
    """The body's ``vector`` as a unit float32 vector of the graph's dimension, if given."""
    vector = body.get("vector")
    if vector is None:
        return None
    if not isinstance(vector, np.ndarray) or vector.ndim != 1:
        raise BadRequest("vector must be a one-dimensional float32 array")
    if state.dim is None:
        return None  # an empty graph: no key to compare with, whatever the dimension
    if vector.shape[0] != state.dim:
        raise BadRequest(f"vector must be a float32 array of shape ({state.dim},)")
    norm = float(np.linalg.norm(vector))
    if norm == 0 or not np.isfinite(norm):
        raise BadRequest("vector must be finite and non-zero")
    unit: np.ndarray = (vector / norm).astype(np.float32)
    return unit


def near_misses(index: KeyIndex, nearest: Nearest, floor: float) -> dict[str, float]:
    """A query that matched nothing: its ``NEAR_MISS_KEYS`` nearest concept keys at or above
    ``floor`` (the keys the MCP recall offers as ``nearest_keys``), for alias learning."""
    best = zip(nearest.rows.tolist(), nearest.cosines.tolist(), strict=True)
    return {index.ids[row]: c for row, c in list(best)[:NEAR_MISS_KEYS] if c >= floor}


def match_keys(
    state: GraphState, buffer: RecallBuffer, thresholds: Thresholds, raw: Any, now: float
) -> dict[str, Any]:
    body = body_of(raw)
    namespace = namespace_of(body)
    top_k = opt_int(body, "top_k", 10, 1, MATCH_MAX_TOP_K)
    text = opt_str(body, "text", CONTENT_MAX_CHARS)
    learn = opt_bool(body, "learn", True)
    unit = query_vector(state, body)
    min_cosine = thresholds.key_recall
    if body.get("min_cosine") is not None:
        value = body["min_cosine"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not -1 <= value <= 1:
            raise BadRequest("min_cosine must be a number in [-1, 1]")
        min_cosine = float(value)
    index = state.indexes.get(namespace)
    if index is None or len(index) == 0:
        return {"namespace": namespace, "keys": []}
    literal: dict[str, str] = {}  # key id -> "concept" | "alias"
    if text:
        for phrase in query_phrases(text):
            for key_id in index.literal.get(phrase, ()):
                key = state.keys[key_id]
                literal[key_id] = "concept" if phrase == surface_norm(key.concept) else "alias"
    nearest = (
        None if unit is None else index.nearest_concepts(unit[None, :], top_k * 4 + len(literal))[0]
    )
    candidates: dict[str, tuple[float, str, float | None]] = {}
    for key_id, kind in literal.items():
        key = state.keys[key_id]
        cosine = None if unit is None else index.cosine(key_id, unit)
        score = 1.0 if key.is_entity else max(cosine or 0.0, min_cosine)
        candidates[key_id] = (score, kind, cosine)
        if kind == "alias":
            _hit_learned_alias(state, key_id, text or "", now)
    weak: dict[str, float] = {}
    if nearest is not None:
        for row, cosine in zip(nearest.rows.tolist(), nearest.cosines.tolist(), strict=True):
            key_id = index.ids[row]
            if key_id in candidates:
                continue
            if cosine >= min_cosine:
                candidates[key_id] = (cosine, "semantic", cosine)
            if learn and text and is_short_concept(text) and cosine >= thresholds.alias_floor:
                weak[key_id] = cosine
    if learn and text and weak:
        buffer.push(text, weak)
    elif learn and text and nearest is not None and not candidates and is_short_concept(text):
        near = near_misses(index, nearest, thresholds.key_recall * NEAR_MISS_SHARE)
        buffer.push(text, near, near_miss=True)
    phrase_floor = thresholds.key_recall + PHRASE_MARGIN
    for key_id, cosine in _phrase_matches(index, body, phrase_floor).items():
        if key_id not in candidates or candidates[key_id][0] < cosine:
            kind = candidates[key_id][1] if key_id in candidates else "phrase"
            candidates[key_id] = (cosine, kind, cosine)
    # Equal scores: a literal match first, then the more specific key (fewer memories: the
    # stronger anchor), then the id, so the order never depends on the run.
    ranked = sorted(
        (
            (score, kind != "semantic", -state.active_count[key_id], key_id, kind, cosine)
            for key_id, (score, kind, cosine) in candidates.items()
            if state.active_count.get(key_id, 0) > 0
        ),
        reverse=True,
    )[:top_k]
    keys = []
    for score, is_literal, _, key_id, kind, cosine in ranked:
        view = key_view(state, state.keys[key_id])
        view.update(
            score=round(score, SCORE_DIGITS),
            cosine=None if cosine is None else round(cosine, SCORE_DIGITS),
            literal=is_literal,
            match_type=kind,
        )
        keys.append(view)
    return {"namespace": namespace, "keys": keys}


PHRASES_MAX = 16
PHRASE_KEYS_MAX = 10
# A phrase's key must be this much closer (cosine) than the model's key-recall threshold: one
# word lands nearer its keys than a whole question does, so the whole-query floor lets generic
# words reach hub keys (measured on the dev files: docs/history/benchmarks-2026-11-29-to-12-01.md).
PHRASE_MARGIN = 0.15


def _phrase_matches(index: KeyIndex, body: dict[str, Any], floor: float) -> dict[str, float]:
    """Concept keys near the query's own phrases (``phrase_vectors``, one row each): for every
    phrase its ``phrase_keys`` nearest concept keys at or above ``floor`` (or the request's
    ``phrase_min_cosine``), with the cosine.

    A whole question's vector lies far from any one-word key (an English question to its
    Korean statute's key: median cosine 0.17), while its words land on the keys they name,
    across languages too ("vote" → 선거 0.93): matching per phrase reaches keys the whole
    query cannot.
    """
    raw = body.get("phrase_vectors")
    if raw is None:
        return {}
    per_phrase = opt_int(body, "phrase_keys", 1, 1, PHRASE_KEYS_MAX)
    floor = opt_number(body, "phrase_min_cosine", floor, -1.0, 1.0)
    if not isinstance(raw, np.ndarray) or raw.ndim != 2 or raw.shape[1] != index.dim:
        raise BadRequest("phrase_vectors must be a two-dimensional float32 array of key width")
    if raw.shape[0] > PHRASES_MAX:
        raise BadRequest(f"at most {PHRASES_MAX} phrase_vectors")
    norms = np.linalg.norm(raw, axis=1, keepdims=True)
    if not np.all(np.isfinite(norms)) or np.any(norms == 0):
        raise BadRequest("phrase_vectors must be finite and non-zero")
    found: dict[str, float] = {}
    for nearest in index.nearest_concepts(raw / norms, per_phrase):
        for row, cosine in zip(nearest.rows.tolist(), nearest.cosines.tolist(), strict=True):
            key_id = index.ids[row]
            if cosine >= floor and cosine > found.get(key_id, -1.0):
                found[key_id] = cosine
    return found


def _hit_learned_alias(state: GraphState, key_id: str, text: str, now: float) -> None:
    phrases = query_phrases(text)
    for alias in state.keys[key_id].aliases:
        if alias.learned and surface_norm(alias.alias) in phrases:
            alias.hits += 1
            alias.last_hit_at = now
            state.changes.rewrite_aliases(state.keys[key_id])


def memory_keys(state: GraphState, raw: Any, now: float) -> dict[str, Any]:
    body = body_of(raw)
    ids = id_list(body, "memory_ids")
    namespace = namespace_of(body)
    unit = query_vector(state, body)  # given: each key also gets its cosine to it
    index = state.indexes.get(namespace)
    out: dict[str, list[dict[str, Any]]] = {}
    relevant: list[tuple[dict[str, Any], str]] = []  # views to give their key's cosine
    for memory_id in ids:
        memory = state.memories.get(memory_id)
        if memory is None or memory.namespace != namespace or memory.expired(now):
            out[memory_id] = []
            continue
        rows = []
        for key_id, link in state.mem_links[memory_id].items():
            view = key_view(state, state.keys[key_id])
            view["weight"] = round(link.weight, SCORE_DIGITS)
            view["auto"] = link.auto
            if unit is not None and index is not None and key_id in index.pos:
                relevant.append((view, key_id))
            rows.append(view)
        out[memory_id] = rows
    if unit is not None and index is not None and relevant:
        cosines = index.cosines([key_id for _, key_id in relevant], unit)
        for (view, _), cosine in zip(relevant, cosines, strict=True):
            view["relevance"] = round(cosine, SCORE_DIGITS)
    return {"namespace": namespace, "memories": out}


def _seeds_of(body: dict[str, Any]) -> dict[str, float]:
    raw = body.get("seeds")
    if not isinstance(raw, dict) or not raw or len(raw) > 1_000:
        raise BadRequest("seeds must be an object of memory_id -> score (1..1000 entries)")
    seeds: dict[str, float] = {}
    for memory_id, score in raw.items():
        if (
            not isinstance(memory_id, str)
            or isinstance(score, bool)
            or not isinstance(score, int | float)
        ):
            raise BadRequest("seeds must map memory ids to numbers")
        seeds[memory_id] = float(score)
    return seeds


def expand(state: GraphState, raw: Any, now: float) -> dict[str, Any]:
    """Memories reachable from the seeds in 1..hops hops, each with its best score."""
    body = body_of(raw)
    namespace = namespace_of(body)
    seeds = _seeds_of(body)
    hops = opt_int(body, "hops", 2, 1, HOPS_MAX)
    per_hop = opt_int(body, "per_hop", EXPAND_PER_HOP_DEFAULT, 1, 500)
    per_key = opt_int(body, "per_key", EXPAND_PER_KEY_DEFAULT, 1, 1_000)
    follow_related = opt_bool(body, "related", True)

    # A hub's members are reached from many frontier memories: each memory's standing is
    # worked out once per walk (its freshness factor, or None when it cannot be reached),
    # each key's IDF and strongest links once per walk (the visited are left out per hop,
    # on the hop's arrays).
    standing: dict[str, float | None] = {}

    def fresh_factor(memory_id: str) -> float | None:
        if memory_id in standing:
            return standing[memory_id]
        memory = state.memories.get(memory_id)
        value = None
        if memory is not None and memory.namespace == namespace and memory.active(now):
            value = freshness_factor(freshness(memory, now))
        standing[memory_id] = value
        return value

    keys: dict[str, tuple[float, Strongest]] = {}

    def members(key_id: str) -> tuple[float, Strongest]:
        """A key's IDF and strongest links."""
        if key_id not in keys:
            idf = key_idf(state.keys[key_id], state.active_count.get(key_id, 0))
            keys[key_id] = idf, state.strongest_columns(key_id, per_key)
        return keys[key_id]

    visited = {m for m in seeds if fresh_factor(m) is not None}
    frontier = {m: s for m, s in seeds.items() if m in visited}
    found: dict[str, dict[str, Any]] = {}
    for hop in range(1, hops + 1):
        factor = HOP_DECAY * (EXPAND_LATER_HOP_FACTOR if hop >= 2 else 1.0)
        # every path to every memory, in walk order, a run of them per step (a key or the
        # related_to links of a frontier memory): a path's bound is its run's scale times its
        # link's weight, and it scores its bound times the memory's freshness factor (at most 1)
        runs: list[_Run] = []
        for memory_id, base in frontier.items():
            for key_id in state.mem_links[memory_id]:
                idf, strongest = members(key_id)
                runs.append(_Run(base * factor * idf, strongest, key_id, memory_id))
            if follow_related:
                memory = state.memories[memory_id]
                neighbours = set(memory.related_to) | state.related_by.get(memory_id, set())
                # a neighbour no longer in the graph can never be reached
                others = [m for m in neighbours if m in state.memories]
                if others:
                    runs.append(_Run.related(state, base * factor, others, memory_id))
        visited_numbers = [state.links.memory_number(m) for m in visited]
        best = _best_reached(runs, visited_numbers, fresh_factor, per_hop)
        frontier = {}
        for other, (score, via, origin) in best:
            visited.add(other)
            frontier[other] = score
            found[other] = {
                "memory_id": other,
                "score": round(score, 6),
                "hop": hop,
                "via": via,
                "from": origin,
            }
        if not frontier:
            break
    ordered = sorted(found.values(), key=lambda row: -row["score"])
    return {"namespace": namespace, "memories": ordered}


class _Run(NamedTuple):
    """One step of a hop from a frontier memory (``origin``): through a key's strongest links
    or through its related_to links (``via``), each link a path of bound ``scale`` × weight."""

    scale: float
    links: Strongest
    via: str
    origin: str

    @classmethod
    def related(cls, state: GraphState, scale: float, others: list[str], origin: str) -> _Run:
        """The related_to links of ``origin`` to ``others``: each counts as a default link."""
        links = Strongest(
            [],
            others,
            np.array([state.links.memory_number(m) for m in others], dtype=np.int64),
            np.ones(len(others), dtype=np.float64),
            np.zeros(len(others), dtype=np.uint8),
        )
        return cls(scale, links, "related_to", origin)


def _best_reached(
    runs: list[_Run],
    visited: list[int],
    fresh_factor: Callable[[str], float | None],
    count: int,
) -> list[tuple[str, tuple[float, str, str]]]:
    """The ``count`` best memories the ``runs`` reach (the ``visited`` memory numbers left
    out) with their best path (score, via, from), best first, ties in the order the walk
    reached them; each memory's first path to its best score counts.

    A hop reaches thousands of memories to keep a few: the paths are grouped by memory in
    arrays, and a memory is priced (its standing looked up) in the order of its best bound,
    the pricing stopping once no bound left can reach the ``count``-th score, since no
    freshness factor exceeds 1.
    """
    if not runs:
        return []
    lengths = np.array([len(run.links.memory_ids) for run in runs], dtype=np.int64)
    scales = np.array([run.scale for run in runs], dtype=np.float64)
    numbers = np.concatenate([run.links.numbers for run in runs])
    bounds = np.repeat(scales, lengths) * np.concatenate([run.links.weights for run in runs])
    # the paths that count, in walk order (a path's position: its run's start + its place)
    kept = np.flatnonzero((bounds > 0.0) & ~np.isin(numbers, visited))
    if not len(kept):
        return []
    ends = np.cumsum(lengths).tolist()

    def run_of(path: int) -> tuple[_Run, int]:
        """The run a path position lies in, and its place in the run."""
        at = bisect.bisect_right(ends, path)
        return runs[at], path - (ends[at] - len(runs[at].links.memory_ids))

    # each memory's paths together in walk order; ``first``: where the walk first reached it
    _, first, memory = np.unique(numbers[kept], return_index=True, return_inverse=True)
    grouped = kept[np.argsort(memory, kind="stable")]
    sizes = np.bincount(memory)
    starts = np.cumsum(sizes) - sizes
    grouped_bounds = bounds[grouped]
    best = np.maximum.reduceat(grouped_bounds, starts)
    first_paths, best_of = kept[first].tolist(), best.tolist()
    starts_at, sizes_of = starts.tolist(), sizes.tolist()
    scored: list[tuple[float, int, str, str, str]] = []
    top: list[float] = []  # a min-heap of the best ``count`` scores so far
    for reached in np.argsort(-best, kind="stable").tolist():
        if len(top) == count and best_of[reached] < top[0]:
            break
        at = first_paths[reached]
        run, place = run_of(at)
        other = run.links.memory_ids[place]
        fresh = fresh_factor(other)
        if fresh is None:
            continue
        score, path = 0.0, -1
        start = starts_at[reached]
        paths = grouped_bounds[start : start + sizes_of[reached]].tolist()
        for candidate, path_bound in enumerate(paths):
            if (path_score := path_bound * fresh) > score:
                score, path = path_score, candidate
        if path < 0:
            continue
        run, _ = run_of(int(grouped[start + path]))
        scored.append((score, at, other, run.via, run.origin))
        if len(top) < count:
            heapq.heappush(top, score)
        elif score > top[0]:
            heapq.heapreplace(top, score)
    scored.sort(key=lambda row: (-row[0], row[1]))
    return [(other, (score, via, origin)) for score, _, other, via, origin in scored[:count]]
