"""Inject: what the prompt-submit hook surfaces, precision before recall.

The hook puts its result in front of the model on every prompt, unasked, so a wrong memory
costs more than a missing one. Inject runs hybrid search (hops 2, nothing reinforced) in every
namespace at once — the prompt is analysed once, the namespaces' graph and reranker calls run
in parallel (``Search.search_all``) — and keeps a candidate only when

* it is about whom the prompt names: when the prompt names people or things the store has as
  name/proper-noun keys, the memory must mention (or be filed under) one of them — "what did
  Caroline say about the race" must not surface Melanie's race; when it names a person, only a
  person counts ("what did Joanna take to the beach in Tampa" is not answered by Nate's Tampa),
  and a memory whose text names another of its persons first is that person's ("Is Oscar
  Melanie's pet?" is not answered by "Caroline has a guinea pig named Oscar"), as is one that
  gives the thing asked about to another owner ("Tim's team" is not "John's team");
* every structured token of the prompt (a version like 3.11.2 or v0.6.2, an issue like #123, a
  hash) appears in it verbatim — "3.11.2" must not surface a note about 3.12;
* the graph connects it to the prompt (a matched key, a literal name, or a hop) and its
  reranker relevance reaches the floor for that score kind — unless its words alone cover most
  of what the prompt asks (the cosine default reads the head and one window of a long memory,
  and auto-keys rarely name the detail asked about);
* it holds what the prompt asks *about* the entities it names: the idf-weighted share of the
  prompt's content words, the named entities' own words left out (``lexicon.coverage``),
  reaches a floor — "what does Donggyun drink at night" is not answered by "Donggyun likes
  coffee" because it names Donggyun. Two other paths stand in for shared words: a strong
  relevance (a paraphrase shares meaning, not words), and, where the prompt and the memory are
  written in different scripts and so can share no word, the graph reaching the memory through
  meaning — a key the prompt's own words landed on across languages (``phrase`` match), a key
  near the prompt's vector (the search's ``near_key`` fallback), the memory's own text vector
  near the prompt's (the dense leg) — with a relevance floor of its own
  (``CROSS_SCRIPT_RELEVANCE_BY_KIND``); with no relevance (the reranker degraded) nothing
  crosses.

And it surfaces nothing when the prompt's facts belong to someone else: if a memory about
another entity covers the prompt at least as well as every memory about the named one, the
prompt's premise is not in the store ("what did Caroline realise after her charity race", when
the race was Melanie's), and showing either would mislead. A tie counts where the named one's
best memory holds only part of what is asked: another's memory holding the same part says the
words match a frame two people share, not the asked fact, and the reranker cannot break the
tie (it favours the memory naming the prompt's person, whether or not it holds the asked fact)
— so "What is Jon's favorite style of painting?" is not answered by "Jon's favorite dance style
is contemporary" when "Gina's favorite dance style is contemporary" is stored too. A memory
holding every asked word answers the question as asked ("What is Gina's favorite style of
dance?"), whoever else's does too. It is silent too when the prompt names beside a person a
thing (a place, a title) or another person (a pet's name) that only another person's memory
holds: "Why does Tim like Aragorn?" is not answered by Tim's fantasy books when only John's
memories hold Aragorn, nor "Is Oscar Melanie's pet?" by Melanie's cat when only Caroline's
memory holds Oscar.

Then it takes the top few and cuts each preview and the whole block to a size budget. The
thresholds (``Gate``) were calibrated with ``benchmarks/inject_calibration.py``, which swaps the
gate in-process on observations recorded once per query (docs/RECALL.md, "Inject").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from math import inf, isclose
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import BadRequest, KeymemError
from keymem.protocol.fields import only_fields, opt_int
from keymem.protocol.limits import DEFAULT_BUDGET_MS, PROMPT_MAX_CHARS
from keymem.protocol.worker import remaining_ms
from keymem.services.graph.text import first_named, name_pattern
from keymem.services.memory.search import (
    SCRIPTS,
    Search,
    SearchRequest,
    rerank_segments,
)

TOP_K_DEFAULT = 2
TOP_K_MAX = 10
CANDIDATES = 10  # of hybrid search's ranking, per namespace, for the gates to judge
MAX_CHARS_DEFAULT = 2_000
MAX_CHARS_RANGE = (256, 20_000)
PREVIEW_CHARS = 400
MAX_NAMESPACES = 8
# What an inject body may carry (``session_id`` is the learner's: services/memory/learning.py).
INJECT_FIELDS = ("prompt", "namespace", "namespaces", "top_k", "max_chars", "session_id")
# Relevance floors per reranker score kind, for the offline default (USE-m query/passage
# cosine) and for cross-encoder logits (sigmoid 0.5); KEYMEM_INJECT_MIN_RELEVANCE (the Gate's
# min_relevance) overrides whichever kind is in use.
MIN_RELEVANCE_BY_KIND = {"embedding_cosine": 0.3, "cross_encoder_logit": 0.0}
# Relevance at which a memory needs no shared words: a paraphrase shares meaning, not words. The
# MCP recall tool's preview takes this level (services/memory/navigation.py).
STRONG_RELEVANCE_BY_KIND = {"embedding_cosine": 0.6, "cross_encoder_logit": 3.0}
# Inject's level for the same escape hatch (the coverage gate's), lower for the cosine: the
# premise check with ties silences the misattributed memories a relevance of 0.55-0.6 lets in.
# Calibrated as the lowest level at which the fit half (A) of neither LoCoMo family (agent keys,
# auto keys) shows more of its unanswerable prompts than at 0.6; it held on half B and on the
# other files (docs/history/inject-premise-2026-12-02.md). Logits: not measured, unchanged.
INJECT_STRONG_RELEVANCE_BY_KIND = {"embedding_cosine": 0.55, "cross_encoder_logit": 3.0}
# The share of what is asked (stemmed words) a memory must hold. Calibrated as the smallest floor
# at which the fit half (A) of both LoCoMo families (agent keys, auto keys) loses neither
# not-found rate nor gold shown against unstemmed matching at 0.2; it held on half B and on the
# other files (docs/history/recall-stems-2026-12-02.md).
MIN_COVERAGE = 0.3
# The relevance a memory in another script than the prompt needs, where no word can be shared
# and the graph reached it through meaning only: for the offline default, above 99 % of English
# questions against unrelated Korean statutes (docs/CALIBRATION.md: p99 0.337); a multilingual
# cross-encoder's logits need no more than its usual floor (not measured: none is offline).
CROSS_SCRIPT_RELEVANCE_BY_KIND = {"embedding_cosine": 0.35, "cross_encoder_logit": 0.0}
# Coverage at which a memory is found by its words alone: it holds at least half of the idf
# weight of what the prompt asks, though no key links it and the reranker (which reads a long
# passage's head and one window of it) may score it low. The MCP recall tool's content path
# uses the same level (services/memory/navigation.py).
STRONG_COVERAGE = 0.5
ENTITY_KEY_TYPES = frozenset({"name", "proper_noun"})
# An owner and the thing it owns: "Tim's team" (straight or curly apostrophe); in a memory only
# a capitalised owner (a name) counts.
POSSESSIVE = re.compile(r"(\w+)['’]s\s+(\w+)")
# A key the prompt's own words reached across languages (graph matching's ``phrase`` match).
CROSS_SCRIPT_MATCHES = frozenset({"phrase"})
STRUCTURED_TOKEN = re.compile(
    r"(?<![\w.])v?(\d+(?:\.\d+){2,})(?![\w.])"  # versions with three parts or more: 3.11.2
    r"|(?<!\w)(#\d+)\b"  # issue and PR numbers: #123
    r"|\b((?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40})\b",  # hex hashes: a1b2c3d
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
    """The prompt's versions (without a leading v), issue numbers and hashes, lower-cased."""
    return [next(g for g in m.groups() if g).lower() for m in STRUCTURED_TOKEN.finditer(text)]


def scripts_of(text: str) -> frozenset[str]:
    return frozenset(name for name, letters in SCRIPTS.items() if letters.search(text))


def _below(relevance: float | None, floor: float | None) -> bool:
    return floor is not None and relevance is not None and relevance < floor


def graph_connected(candidate: dict[str, Any]) -> bool:
    parts = candidate["components"]
    return parts["key_rank"] is not None or parts["literal"] or parts["hop"] > 0


def mentions(text: str, surface: str) -> bool:
    """``surface`` occurs in ``text`` as a whole word where it is Latin (so "Tim" is not in
    "time"), as a substring elsewhere (a Korean name is followed by its particle: "갑은")."""
    return name_pattern(surface).search(text) is not None


@dataclass(frozen=True)
class Entity:
    key_id: str
    surfaces: tuple[str, ...]
    person: bool = False

    def named_in(self, text: str) -> bool:
        return any(mentions(text, s) for s in self.surfaces)


def named_entities(prompt: str, keys: list[dict[str, Any]]) -> list[Entity]:
    """The matched name/proper-noun keys whose concept or an alias the prompt spells out."""
    found = []
    for key in keys:
        if key.get("key_type") not in ENTITY_KEY_TYPES:
            continue
        surfaces = tuple(s for s in [key.get("concept"), *(key.get("aliases") or [])] if s)
        entity = Entity(str(key["key_id"]), surfaces, key.get("key_type") == "name")
        if entity.named_in(prompt):
            found.append(entity)
    return found


def without_entities(prompt: str, entities: Sequence[Entity]) -> str:
    """The prompt with the named entities' words taken out: what it asks about them."""
    for entity in entities:
        for surface in sorted(entity.surfaces, key=len, reverse=True):
            prompt = name_pattern(surface).sub(" ", prompt)
    return prompt


def about_entities(
    candidate: dict[str, Any],
    entities: list[Entity],
    persons: bool = False,
    subject: str | None = None,
) -> bool:
    """The memory is about one of the named entities — when the prompt names a person (and
    ``persons``), about one of the named persons, and its ``subject`` (the person its text
    names first, when known) is one of them."""
    if not entities:
        return True
    if persons and any(e.person for e in entities):
        entities = [e for e in entities if e.person]
        if subject is not None and all(e.key_id != subject for e in entities):
            return False
    return any(held(candidate, e) for e in entities)


def owned_elsewhere(prompt: str, content: str, entities: list[Entity]) -> bool:
    """The prompt asks about a named entity's thing ("Tim's team") and the memory gives that
    thing to another owner ("Tim asks about John's team"): the thing the memory holds is the
    other's, whoever its text names first. Any named entity, not only a ``name`` key: auto-keys
    type a person's name as a proper noun."""
    named = {word.lower() for e in entities for s in e.surfaces for word in s.split()}
    asked = {thing.lower() for owner, thing in POSSESSIVE.findall(prompt) if owner.lower() in named}
    return any(
        thing.lower() in asked and owner[:1].isupper() and owner.lower() not in named
        for owner, thing in POSSESSIVE.findall(content)
    )


def held(candidate: dict[str, Any], entity: Entity) -> bool:
    """The memory is filed under the entity or its text names it."""
    return entity.key_id in (candidate.get("matched_keys") or []) or entity.named_in(
        candidate["content"]
    )


def _named_elsewhere(
    entities: list[Entity], plausible: list[dict[str, Any]], elsewhere: list[dict[str, Any]]
) -> bool:
    """A name the prompt spells beside a person — a thing (a place, a title) or another
    person (a pet's name) — that none of the named persons' memories holds and another
    person's does: the prompt pins that one's fact on the person it names ("Is Oscar
    Melanie's pet?" when only Caroline's memory holds Oscar). Coverage cannot see it: what is
    asked leaves the named entities' words out."""
    if not any(e.person for e in entities):
        return False
    return any(
        not any(held(c, e) for c in plausible) and any(held(c, e) for c in elsewhere)
        for e in entities
    )


def subject_of(content: str, keys: list[dict[str, Any]]) -> str | None:
    """The key id of the person (a ``name`` key the memory is filed under) its text names
    first: whom the memory is about. None when its text names none of them."""
    people = (
        (str(key["key_id"]), [key.get("concept"), *(key.get("aliases") or [])])
        for key in keys
        if key.get("key_type") == "name"
    )
    return first_named(content, people)


def crosses_scripts(prompt: str, candidate: dict[str, Any], keys: list[dict[str, Any]]) -> bool:
    """The prompt and the memory share no script, and the graph reached the memory through
    meaning: a key the prompt's own words landed on across languages (a ``phrase`` match), one
    of the keys nearest the prompt's vector (the search's ``near_key`` fallback), or the
    memory's own text vector among the nearest the prompt's (the dense leg's ``dense_rank``)."""
    if scripts_of(prompt) & scripts_of(candidate["content"]):
        return False
    components = candidate.get("components") or {}
    if components.get("near_key") or components.get("dense_rank") is not None:
        return True
    crossing = {k["key_id"] for k in keys if k.get("match_type") in CROSS_SCRIPT_MATCHES}
    return not crossing.isdisjoint(candidate.get("matched_keys") or [])


@dataclass(frozen=True)
class Gate:
    """Inject's admission thresholds (the module docstring says why each exists). The
    calibration benchmark builds variants of it in-process; the wire carries none."""

    min_relevance: float | None = None  # None: the floor for the reranker's score kind
    strong_relevance: float | None = None  # None: the level for the score kind
    min_coverage: float = MIN_COVERAGE
    strong_coverage: float = STRONG_COVERAGE
    entities: bool = True
    premise: bool = True
    premise_ties: bool = True  # covering as much counts too (below full coverage)
    cross_script: bool = True
    cross_relevance: float | None = None  # None: the level for the score kind
    persons: bool = True
    subjects: bool = True
    premise_things: bool = True  # a name only another person's memory holds counts too
    owners: bool = True  # the asked entity's thing given to another owner is the other's

    def cross_floor(self, kind: str) -> float | None:
        if self.cross_relevance is not None:
            return self.cross_relevance
        return CROSS_SCRIPT_RELEVANCE_BY_KIND.get(kind)

    def floor(self, kind: str) -> float | None:
        if self.min_relevance is not None:
            return self.min_relevance
        return MIN_RELEVANCE_BY_KIND.get(kind)

    def strong(self, kind: str) -> float | None:
        if self.strong_relevance is not None:
            return self.strong_relevance
        return INJECT_STRONG_RELEVANCE_BY_KIND.get(kind)


@dataclass
class Observation:
    """What the gates judge in one namespace: search's candidates and matched keys, how
    much of the prompt (named entities left out) each candidate covers — None where the
    lexicon could not say —, and each candidate's subject (``subject_of``; None where the
    graph could not say)."""

    namespace: str
    candidates: list[dict[str, Any]]
    keys: list[dict[str, Any]]
    coverage: dict[str, float] | None = None
    degraded: dict[str, str] = field(default_factory=dict)
    subjects: dict[str, str | None] | None = None


def admit(
    prompt: str,
    candidates: list[dict[str, Any]],
    keys: list[dict[str, Any]],
    coverage: dict[str, float] | None,
    gate: Gate,
    subjects: dict[str, str | None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The candidates inject may show, in their order, and how many each gate rejected.

    ``coverage`` (memory id -> share of the idf weight of what the prompt asks, its named
    entities left out) is None when the lexicon could not say; the coverage and premise gates
    then stand aside. ``subjects`` (memory id -> the person key its text names first) is None
    when the graph could not say; the subject check then stands aside.
    """
    known = (subjects or {}) if gate.subjects else {}
    rejected = dict.fromkeys(REJECTIONS, 0)
    required = structured_tokens(prompt)
    entities = named_entities(prompt, keys) if gate.entities else []

    def covered(candidate: dict[str, Any]) -> float | None:
        """None where the lexicon cannot say (down, or not yet indexed): the coverage gates
        then stand aside for that candidate."""
        return None if coverage is None else coverage.get(candidate["memory_id"])

    plausible, elsewhere, crossing = [], [], set()
    for candidate in candidates:
        relevance = candidate.get("rerank_score")
        kind = candidate.get("rerank_kind", "")
        share = covered(candidate)
        lexical = share is not None and share >= gate.strong_coverage
        # across scripts the relevance is the only evidence: without it (the reranker
        # degraded) nothing crosses
        crosses = (
            gate.cross_script and relevance is not None and crosses_scripts(prompt, candidate, keys)
        )
        # words that hold half of what is asked outweigh a long memory's partial reading by
        # the reranker
        floor = gate.cross_floor(kind) if crosses else None if lexical else gate.floor(kind)
        subject = known.get(candidate["memory_id"])
        if not about_entities(candidate, entities, gate.persons, subject) or (
            gate.owners and owned_elsewhere(prompt, candidate["content"], entities)
        ):
            rejected["other_entity"] += 1
            elsewhere.append(candidate)
        elif any(token not in candidate["content"].lower() for token in required):
            rejected["missing_token"] += 1
        elif not (lexical or crosses or graph_connected(candidate)):
            rejected["bm25_only"] += 1
        elif _below(relevance, floor):
            rejected["below_floor"] += 1
        else:
            plausible.append(candidate)
            if crosses:
                crossing.add(candidate["memory_id"])
    best_here = max((share or 0.0 for share in map(covered, plausible)), default=0.0)

    def outcovers(share: float) -> bool:
        """Another entity's memory holds more of what is asked than the named one's best — or
        as much (``premise_ties``), where the named one's best holds some but not all of it:
        one that holds every asked word answers the question as asked, whoever else does."""
        partial = best_here > 0 and not isclose(best_here, 1.0)
        tie = gate.premise_ties and partial and isclose(share, best_here)
        return share > best_here or tie

    if gate.premise and (
        any(outcovers(covered(c) or 0.0) for c in elsewhere)
        or (gate.premise_things and _named_elsewhere(entities, plausible, elsewhere))
    ):
        rejected["premise_elsewhere"] += len(plausible)
        return [], rejected
    kept = []
    for candidate in plausible:
        share = covered(candidate)
        strong = gate.strong(candidate.get("rerank_kind", ""))
        if (
            share is None
            or share >= gate.min_coverage
            or (strong is not None and (candidate.get("rerank_score") or -inf) >= strong)
            or candidate["memory_id"] in crossing
        ):
            kept.append(candidate)
        else:
            rejected["low_coverage"] += 1
    return kept, rejected


def judge(
    prompt: str, observations: list[Observation], gate: Gate, top_k: int
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The best ``top_k`` candidates every namespace's gates admit, and the rejection counts.

    Best by search's blended evidence plus the share of what the prompt asks that the memory
    holds: one more unit of evidence on the blend's scale, which search cannot weigh because
    it does not know which of the prompt's words are the named entities (docs/history/
    inject-gate-2026-12-02.md: gold shown rose on every family and half).
    """
    kept: list[tuple[float, dict[str, Any]]] = []
    rejected = dict.fromkeys(REJECTIONS, 0)
    for seen in observations:
        admitted, counts = admit(
            prompt, seen.candidates, seen.keys, seen.coverage, gate, seen.subjects
        )
        held = seen.coverage or {}
        kept.extend((c["score"] + (held.get(c["memory_id"]) or 0.0), c) for c in admitted)
        for reason, count in counts.items():
            rejected[reason] += count
    kept.sort(key=lambda pair: -pair[0])
    return [c for _, c in kept[:top_k]], rejected


@dataclass(frozen=True)
class InjectRequest:
    prompt: str
    namespaces: list[str]
    top_k: int
    max_chars: int

    @classmethod
    def parse(cls, body: Any) -> InjectRequest:
        if not isinstance(body, dict):
            raise BadRequest(f"body must be a map, got {type(body).__name__}")
        only_fields(body, INJECT_FIELDS, "inject")
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
        max_chars = body.get("max_chars", MAX_CHARS_DEFAULT)
        if isinstance(max_chars, bool) or not isinstance(max_chars, int):
            raise BadRequest("max_chars must be an integer")
        low, high = MAX_CHARS_RANGE
        return cls(
            prompt=prompt[:PROMPT_MAX_CHARS],
            namespaces=list(dict.fromkeys(namespaces)),
            top_k=opt_int(body, "top_k", TOP_K_DEFAULT, 1, TOP_K_MAX),
            max_chars=min(high, max(low, max_chars)),
        )


class Inject:
    def __init__(self, search: Search, gate: Gate | None = None) -> None:
        self.search = search
        self.gate = gate or Gate()

    @property
    def client(self) -> Client:
        return self.search.client

    def inject(self, body: Any) -> dict[str, Any]:
        request = InjectRequest.parse(body)
        observations = self.observe(request.prompt, request.namespaces)
        chosen, rejected = judge(request.prompt, observations, self.gate, request.top_k)
        degraded: dict[str, str] = {}
        for seen in observations:
            degraded.update(seen.degraded)
        return {
            "memories": previews(chosen, request.max_chars),
            "required_tokens": structured_tokens(request.prompt),
            "rejected": rejected,
            "degraded": degraded,
        }

    def observe(self, prompt: str, namespaces: list[str]) -> list[Observation]:
        """Search's candidates in every namespace, then how much of what the prompt asks each
        holds and, where the prompt names a person, each one's subject (``_annotate``): one
        analysis of the prompt, the namespaces in parallel."""
        requests = [
            SearchRequest.parse(
                {"query": prompt, "namespace": namespace, "top_k": CANDIDATES, "hops": 2}
            )
            for namespace in namespaces
        ]
        found = self.search.search_all(requests)
        observations = [
            Observation(f["namespace"], f["memories"], f["keys"], degraded=f["degraded"])
            for f in found
        ]
        self._annotate(prompt, observations)
        return observations

    def _annotate(self, prompt: str, observations: list[Observation]) -> None:
        """Each candidate's coverage of the prompt, its named entities left out, and, where the
        prompt names a person (the one case ``admit`` reads it), its subject: one parallel round
        of ``lexicon.coverage`` and ``graph.memory_keys`` calls for the ranked top.

        A long prompt is mostly pasted material around a question, so, as for the reranker, its
        sentences at both ends are covered separately and a candidate keeps its best share. A
        prompt that asks nothing beyond the entities it names leaves coverage out (None).
        """
        calls: list[tuple[str, str, Any]] = []
        owners: list[Observation] = []
        for seen in observations:
            ids = [c["memory_id"] for c in seen.candidates]
            if not ids:
                seen.coverage = {}
                continue
            entities = named_entities(prompt, seen.keys)
            if any(entity.person for entity in entities):
                body = {"memory_ids": ids, "namespace": seen.namespace}
                calls.append(("graph", "memory_keys", body))
                owners.append(seen)
            asked = without_entities(prompt, entities)
            if not re.search(r"\w", asked):
                continue
            for segment in rerank_segments(asked):
                body = {"query": segment, "namespace": seen.namespace, "ids": ids}
                calls.append(("lexicon", "coverage", body))
                owners.append(seen)
        if not calls:
            return
        outcomes = self.client.call_many(calls, timeout_ms=remaining_ms(DEFAULT_BUDGET_MS))
        for seen, outcome, (service, method, body) in zip(owners, outcomes, calls, strict=True):
            if isinstance(outcome, KeymemError):
                seen.degraded[service] = f"{method}: {outcome}"
            elif service == "graph":
                content = {c["memory_id"]: c["content"] for c in seen.candidates}
                seen.subjects = {
                    memory_id: subject_of(content[memory_id], keys)
                    for memory_id, keys in outcome["memories"].items()
                    if memory_id in content
                }
            else:
                best = seen.coverage if seen.coverage is not None else {}
                for memory_id, share in zip(body["ids"], outcome["coverage"], strict=True):
                    if share is not None:
                        best[memory_id] = max(share, best.get(memory_id, 0.0))
                seen.coverage = best


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
