"""Inject: what the prompt-submit hook surfaces, precision before recall.

The hook puts its result in front of the model on every prompt, unasked, so a wrong memory
costs more than a missing one. Inject runs hybrid search (hops 2, nothing reinforced) and keeps
a candidate only when

* it is about whom the prompt names: when the prompt names people or things the store has as
  name/proper-noun keys, the memory must mention (or be filed under) one of them — "what did
  Caroline say about the race" must not surface Melanie's race;
* every structured token of the prompt (a version like 3.11.2, an issue like #123, a hash)
  appears in it verbatim — "3.11.2" must not surface a note about 3.12;
* the graph connects it to the prompt (a matched key, a literal name, or a hop) and its
  reranker relevance reaches the floor for that score kind — unless its words alone cover most
  of the prompt (the cosine default reads the head and one window of a long memory, and
  auto-keys rarely name the detail asked about);
* it covers what the prompt asks about: the idf-weighted share of the prompt's content words it
  contains (``lexicon.coverage``) reaches a floor, unless its relevance alone is strong (a
  paraphrase shares meaning, not words).

And it surfaces nothing when the prompt's facts belong to someone else: if a memory about
another entity covers the prompt better than every memory about the named one, the prompt's
premise is not in the store ("what did Caroline realise after her charity race", when the race
was Melanie's), and showing either would mislead.

Then it takes the top few and cuts each preview and the whole block to a size budget. The
thresholds were calibrated on LoCoMo and LongMemEval (``benchmarks/inject_calibration.py``,
docs/BENCHMARKS.md "Inject: the not-found gate"); a request may override them (``gate``) so the
calibration can sweep them against the running services.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import BadRequest, KeymemError
from keymem.protocol.fields import only_fields, opt_bool, opt_int, opt_number
from keymem.protocol.worker import remaining_ms
from keymem.services.config import ConfigError
from keymem.services.memory.search import DEFAULT_BUDGET_MS, Search, rerank_segments

TOP_K_DEFAULT = 2
TOP_K_MAX = 10
CANDIDATES = 10  # of hybrid search's ranking, per namespace, for the gates to judge
MAX_CHARS_DEFAULT = 2_000
MAX_CHARS_RANGE = (256, 20_000)
PREVIEW_CHARS = 400
MAX_NAMESPACES = 8
MAX_PROMPT_CHARS = 4_000
# Relevance floors per reranker score kind, for the offline default (USE-m query/passage
# cosine) and for cross-encoder logits (sigmoid 0.5); KEYMEM_INJECT_MIN_RELEVANCE overrides
# whichever kind is in use.
MIN_RELEVANCE_BY_KIND = {"embedding_cosine": 0.3, "cross_encoder_logit": 0.0}
MIN_RELEVANCE_ENV = "KEYMEM_INJECT_MIN_RELEVANCE"
# Relevance at which a candidate needs no shared words (the coverage gate's escape hatch).
STRONG_RELEVANCE_BY_KIND = {"embedding_cosine": 0.6, "cross_encoder_logit": 3.0}
MIN_COVERAGE = 0.2
COVERAGE_MAX = 2.0  # above 1 switches a coverage admission off (the calibration's "never")
RELEVANCE_MAX = 100.0  # any cosine or logit a threshold could mean
# Coverage at which a memory is admitted on its words alone: it contains most of what the
# prompt asks about, though no key links it and the reranker (which reads a long passage's head
# and one window of it) scores it low.
STRONG_COVERAGE = 0.6
ENTITY_KEY_TYPES = frozenset({"name", "proper_noun"})
STRUCTURED_TOKEN = re.compile(
    r"(?<![\w.])\d+(?:\.\d+){2,}(?![\w.])"  # versions with at least three parts: 3.11.2
    r"|(?<!\w)#\d+\b"  # issue and PR numbers: #123
    r"|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b",  # hex hashes: a1b2c3d
    re.IGNORECASE,
)
REJECTIONS = (
    "bm25_only",
    "missing_token",
    "other_entity",
    "premise_elsewhere",
    "low_coverage",
    "below_floor",
)


def structured_tokens(text: str) -> list[str]:
    return [m.group(0).lower() for m in STRUCTURED_TOKEN.finditer(text)]


def relevance_floor(score_kind: str) -> float | None:
    """The floor for this score kind, or ``KEYMEM_INJECT_MIN_RELEVANCE`` (``ConfigError`` if
    it is not a number: the router checks it at start and exits 78)."""
    override = os.environ.get(MIN_RELEVANCE_ENV, "").strip()
    if not override:
        return MIN_RELEVANCE_BY_KIND.get(score_kind)
    try:
        return float(override)
    except ValueError as exc:
        raise ConfigError(f"{MIN_RELEVANCE_ENV} must be a number, got {override!r}") from exc


def check_inject_settings() -> None:
    """``ConfigError`` now, at start, for a setting every inject would otherwise fail on."""
    relevance_floor("")


def graph_connected(candidate: dict[str, Any]) -> bool:
    parts = candidate["components"]
    return parts["key_rank"] is not None or parts["literal"] or parts["hop"] > 0


def mentions(text: str, surface: str) -> bool:
    """``surface`` occurs in ``text`` as a whole word where it is Latin (so "Tim" is not in
    "time"), as a substring elsewhere (a Korean name is followed by its particle: "갑은")."""
    pattern = rf"(?<![A-Za-z0-9]){re.escape(surface)}(?![A-Za-z0-9])"
    return re.search(pattern, text, re.IGNORECASE) is not None


@dataclass(frozen=True)
class Entity:
    key_id: str
    surfaces: tuple[str, ...]

    def named_in(self, text: str) -> bool:
        return any(mentions(text, s) for s in self.surfaces)


def named_entities(prompt: str, keys: list[dict[str, Any]]) -> list[Entity]:
    """The matched name/proper-noun keys whose concept or an alias the prompt spells out."""
    found = []
    for key in keys:
        if key.get("key_type") not in ENTITY_KEY_TYPES:
            continue
        surfaces = tuple(s for s in [key.get("concept"), *(key.get("aliases") or [])] if s)
        entity = Entity(str(key["key_id"]), surfaces)
        if entity.named_in(prompt):
            found.append(entity)
    return found


def about_entities(candidate: dict[str, Any], entities: list[Entity]) -> bool:
    if not entities:
        return True
    filed = set(candidate.get("matched_keys") or [])
    return any(e.key_id in filed or e.named_in(candidate["content"]) for e in entities)


@dataclass(frozen=True)
class Gate:
    """Inject's admission thresholds (the module docstring says why each exists)."""

    min_relevance: float | None = None  # None: the floor for the reranker's score kind
    strong_relevance: float | None = None  # None: the level for the score kind
    min_coverage: float = MIN_COVERAGE
    strong_coverage: float = STRONG_COVERAGE
    entities: bool = True
    premise: bool = True

    @classmethod
    def parse(cls, raw: Any) -> Gate:
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise BadRequest("gate must be a map")
        only_fields(raw, tuple(cls.__dataclass_fields__), "gate")
        base = cls()
        return cls(
            min_relevance=_optional_number(raw, "min_relevance"),
            strong_relevance=_optional_number(raw, "strong_relevance"),
            min_coverage=opt_number(raw, "min_coverage", base.min_coverage, 0.0, COVERAGE_MAX),
            strong_coverage=opt_number(
                raw, "strong_coverage", base.strong_coverage, 0.0, COVERAGE_MAX
            ),
            entities=opt_bool(raw, "entities", base.entities),
            premise=opt_bool(raw, "premise", base.premise),
        )

    def floor(self, kind: str) -> float | None:
        return self.min_relevance if self.min_relevance is not None else relevance_floor(kind)

    def strong(self, kind: str) -> float | None:
        if self.strong_relevance is not None:
            return self.strong_relevance
        return STRONG_RELEVANCE_BY_KIND.get(kind)


def _optional_number(raw: dict[str, Any], name: str) -> float | None:
    """A relevance threshold in the reranker's own units (a cosine or a logit), or None."""
    if raw.get(name) is None:
        return None
    return opt_number(raw, name, 0.0, -RELEVANCE_MAX, RELEVANCE_MAX)


def admit(
    prompt: str,
    candidates: list[dict[str, Any]],
    keys: list[dict[str, Any]],
    coverage: dict[str, float] | None,
    gate: Gate,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The candidates inject may show, in their order, and how many each gate rejected.

    ``coverage`` (memory id -> share of the prompt's idf weight) is None when the lexicon could
    not say; the coverage and premise gates then stand aside.
    """
    rejected = dict.fromkeys(REJECTIONS, 0)
    required = structured_tokens(prompt)
    entities = named_entities(prompt, keys) if gate.entities else []

    def covered(candidate: dict[str, Any]) -> float | None:
        """None where the lexicon cannot say (down, or not yet indexed): the coverage gates
        then stand aside for that candidate."""
        return None if coverage is None else coverage.get(candidate["memory_id"])

    plausible, elsewhere = [], []
    for candidate in candidates:
        relevance = candidate.get("rerank_score")
        floor = gate.floor(candidate.get("rerank_kind", ""))
        share = covered(candidate)
        lexical = share is not None and share >= gate.strong_coverage
        if not about_entities(candidate, entities):
            rejected["other_entity"] += 1
            elsewhere.append(candidate)
        elif any(token not in candidate["content"].lower() for token in required):
            rejected["missing_token"] += 1
        elif not lexical and not graph_connected(candidate):
            rejected["bm25_only"] += 1
        elif not lexical and floor is not None and relevance is not None and relevance < floor:
            rejected["below_floor"] += 1
        else:
            plausible.append(candidate)
    best_here = max((share or 0.0 for share in map(covered, plausible)), default=0.0)
    if gate.premise and any((covered(c) or 0.0) > best_here for c in elsewhere):
        rejected["premise_elsewhere"] += len(plausible)
        return [], rejected
    kept = []
    for candidate in plausible:
        share = covered(candidate)
        strong = gate.strong(candidate.get("rerank_kind", ""))
        relevance = candidate.get("rerank_score")
        if (
            share is None
            or share >= gate.min_coverage
            or (strong is not None and relevance is not None and relevance >= strong)
        ):
            kept.append(candidate)
        else:
            rejected["low_coverage"] += 1
    return kept, rejected


class Inject:
    def __init__(self, recall: Search) -> None:
        self.recall = recall

    @property
    def client(self) -> Client:
        return self.recall.client

    def inject(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise BadRequest(f"body must be a map, got {type(body).__name__}")
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise BadRequest("prompt must be a non-empty string")
        single = body.get("namespace")
        namespaces = body.get("namespaces", [single] if isinstance(single, str) else ["default"])
        if (
            not isinstance(namespaces, list)
            or not namespaces
            or len(namespaces) > MAX_NAMESPACES
            or not all(isinstance(n, str) for n in namespaces)
        ):
            raise BadRequest(f"namespaces must be a list of 1..{MAX_NAMESPACES} strings")
        top_k = opt_int(body, "top_k", TOP_K_DEFAULT, 1, TOP_K_MAX)
        max_chars = body.get("max_chars", MAX_CHARS_DEFAULT)
        low, high = MAX_CHARS_RANGE
        if isinstance(max_chars, bool) or not isinstance(max_chars, int):
            raise BadRequest("max_chars must be an integer")
        max_chars = min(high, max(low, max_chars))
        gate = Gate.parse(body.get("gate"))

        prompt = prompt[:MAX_PROMPT_CHARS]
        kept: list[dict[str, Any]] = []
        degraded: dict[str, str] = {}
        rejected = dict.fromkeys(REJECTIONS, 0)
        for namespace in dict.fromkeys(namespaces):
            found = self.recall.search(
                {"query": prompt, "namespace": namespace, "top_k": CANDIDATES, "hops": 2}
            )
            degraded.update(found["degraded"])
            candidates = found["memories"]
            coverage = self._coverage(prompt, found["namespace"], candidates, degraded)
            admitted, counts = admit(prompt, candidates, found["keys"], coverage, gate)
            kept.extend(admitted)
            for reason, count in counts.items():
                rejected[reason] += count
        kept.sort(key=lambda c: -c["score"])
        return {
            "memories": previews(kept[:top_k], max_chars),
            "required_tokens": structured_tokens(prompt),
            "rejected": rejected,
            "degraded": degraded,
        }

    def _coverage(
        self,
        prompt: str,
        namespace: str,
        candidates: list[dict[str, Any]],
        degraded: dict[str, str],
    ) -> dict[str, float] | None:
        """The lexicon's coverage of the prompt by each candidate; None if it cannot answer.

        A long prompt is mostly pasted material around a question, so, as for the reranker, its
        sentences at both ends are covered separately and a candidate keeps its best share.
        """
        if not candidates:
            return {}
        ids = [c["memory_id"] for c in candidates]
        outcomes = self.client.call_many(
            [
                ("lexicon", "coverage", {"query": segment, "namespace": namespace, "ids": ids})
                for segment in rerank_segments(prompt)
            ],
            timeout_ms=remaining_ms(DEFAULT_BUDGET_MS),
        )
        answered = [o for o in outcomes if not isinstance(o, KeymemError)]
        if not answered:
            degraded["lexicon"] = f"coverage: {outcomes[0]}"
            return None
        best: dict[str, float] = {}
        for reply in answered:
            for memory_id, share in zip(ids, reply["coverage"], strict=True):
                if share is not None:
                    best[memory_id] = max(share, best.get(memory_id, 0.0))
        return best


def previews(chosen: list[dict[str, Any]], max_chars: int) -> list[dict[str, Any]]:
    """What the hook shows: each memory cut to a preview, all of them within ``max_chars``."""
    surfaced = []
    budget = max_chars
    for candidate in chosen:
        preview = candidate["content"][: min(PREVIEW_CHARS, budget)]
        if not preview:
            break
        budget -= len(preview)
        surfaced.append(
            {
                "id": candidate["memory_id"],
                "content": preview,
                "truncated": len(preview) < len(candidate["content"]),
                "namespace": candidate["namespace"],
                "score": candidate["score"],
                "score_kind": candidate["score_kind"],
                "relevance": candidate.get("rerank_score"),
                "relevance_kind": candidate.get("rerank_kind"),
                "validity": candidate["validity"],
            }
        )
    return surfaced
