"""Key navigation, the default MCP flow: recall → read_key → read_memory.

``recall`` returns ranked key clusters and at most one passive preview: the best memory under
the strongest key, reranked against the caller's context (or the query). It changes nothing —
no access counts, no reinforcement, no confirmation. ``read_key`` with a query ranks a key's
memories by their relevance to it, so a hub is paged in a useful order. Relevance is the
reranker's score clipped to [0, 1] (a cosine, or a cross-encoder logit through a sigmoid), so it
can multiply a link weight; when the reranker is down the graph's link ranking stands.

Keys come from two paths. The key path: the query's words name a key (concept, alias) or its
vector lands near one. The content path: a memory whose text holds the query (the lexicon's
coverage — the idf-weighted share of the query's words it contains, Lucene's positive idf, so
the scale does not depend on how many memories the namespace has) lends its keys as
``content`` matches; the caller's ``context`` feeds this path too, sentence by sentence.

The preview is held to the gates inject uses for what it shows unasked
(``services/memory/inject.py``), adapted to one memory under one key:

* every structured token of the query (a version such as v0.6.2, an issue number, a hash)
  appears in it — a query about v0.6.2 must not preview the v0.6.1 note;
* a key reached only through content is no anchor: its memory is previewed only when its
  relevance alone is strong ("metal" must not preview "shared metal device control panel");
* it holds what the query asks about the key and the entities it names: the query without
  their words (and without the other keys it names literally) must be covered
  (``MIN_COVERAGE``) unless the relevance is strong — "what does Donggyun drink at night?" does
  not preview "Donggyun likes coffee";
* across scripts (query and memory share no script, so no word) the relevance alone is the
  judge when the key was reached by meaning, at inject's cross-script floor — "딸기" previews
  "the user likes strawberries"; a key the query names (an alias learned from a near miss) is
  the anchor itself;
* with the reranker's not-found gate set (``KEYMEM_RERANK_MIN_SCORE``), a pool whose best
  score is below it previews nothing.

A member that fails is skipped for the next best; when none passes, the keys still answer and
``note`` says why no preview was shown. A preview cut to ``max_chars`` says so (``truncated``,
``content_chars``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import BadRequest, KeymemError
from keymem.protocol.limits import DEFAULT_BUDGET_MS, NAMESPACE_MAX_CHARS, PROMPT_MAX_CHARS
from keymem.protocol.worker import remaining_ms
from keymem.services.graph.text import normalize_namespace
from keymem.services.memory.inject import (
    CROSS_SCRIPT_RELEVANCE_BY_KIND,
    ENTITY_KEY_TYPES,
    MAX_NAMESPACES,
    MIN_COVERAGE,
    STRONG_COVERAGE,
    STRONG_RELEVANCE_BY_KIND,
    Entity,
    about_entities,
    named_entities,
    scripts_of,
    structured_tokens,
    subject_of,
    without_entities,
)
from keymem.services.memory.search import (
    key_summary,
    named_readings,
    named_text,
    rerank_segments,
)

ANALYSE_SHARE = 0.4  # of the remaining time, for the embedder and the lexicon's first round
RECALL_TOP_K_DEFAULT = 8
RECALL_TOP_K_MAX = 20
RERANK_POOL = 30
PREVIEW_MAX_CHARS_DEFAULT = 2_000
# A memory holding this share of the query's (or a context sentence's) idf weight lends its
# keys to the key list as "content" matches even when no key name or vector matched: the level
# at which inject admits a memory on its words alone.
CONTENT_GATE = STRONG_COVERAGE
CONTENT_HITS = 5  # BM25 hits per text whose coverage is asked
# Keys the query names in its own words: what it asks about them is the rest of the query.
LITERAL_MATCHES = frozenset({"concept", "alias"})
MISS_NOTE = (
    "No key matched. nearest_keys are the closest concepts; try one of them with read_key, "
    "or recall with different words."
)
WITHHELD = {
    "missing_token": "none of its memories names {tokens}",
    "no_anchor": "it was reached only through its memories' words, and none is close enough "
    "in meaning to show unasked",
    "low_coverage": "none of its memories holds what the query asks about it",
    "low_relevance": "none of its memories, written in another script, is close enough in meaning",
    "other_entity": "its memories are about someone other than the person the query names",
    "not_found": "the reranker's not-found gate (KEYMEM_RERANK_MIN_SCORE) finds none relevant",
}


def relevance_of(score: float, score_kind: str) -> float:
    """A reranker score mapped onto [0, 1] so it can weigh a link."""
    if score_kind == "cross_encoder_logit":
        return 1.0 / (1.0 + math.exp(-score))
    return min(1.0, max(0.0, score))


def _text(body: dict[str, Any], name: str, required: bool = False) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > PROMPT_MAX_CHARS:
        raise BadRequest(f"{name} must be a non-empty string of at most {PROMPT_MAX_CHARS} chars")
    return value


@dataclass(frozen=True)
class RecallRequest:
    query: str
    context: str | None
    namespace: str
    top_k: int
    max_chars: int
    explain: bool
    namespaces: tuple[str, ...] = ()  # several to search (a project's and default), else ()

    @classmethod
    def parse(cls, body: Any) -> RecallRequest:
        if not isinstance(body, dict):
            raise BadRequest(f"body must be a map, got {type(body).__name__}")
        query = _text(body, "query", required=True)
        assert query is not None
        top_k = body.get("top_k", RECALL_TOP_K_DEFAULT)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 20:
            raise BadRequest(f"top_k must be an integer in [1, {RECALL_TOP_K_MAX}]")
        max_chars = body.get("max_chars", PREVIEW_MAX_CHARS_DEFAULT)
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
            raise BadRequest("max_chars must be a positive integer")
        namespaces = _namespaces(body)
        first = namespaces[0] if namespaces else normalize_namespace(_text(body, "namespace"))
        return cls(
            query=query,
            context=_text(body, "context"),
            namespace=first,
            top_k=top_k,
            max_chars=max_chars,
            explain=bool(body.get("explain")),
            namespaces=tuple(namespaces) if len(namespaces) > 1 else (),
        )


def _namespaces(body: dict[str, Any]) -> list[str]:
    """``namespaces`` (instead of ``namespace``): each is searched, in this order."""
    raw = body.get("namespaces")
    if raw is None:
        return []
    if "namespace" in body:
        raise BadRequest("give namespace or namespaces, not both")
    if (
        not isinstance(raw, list)
        or not 1 <= len(raw) <= MAX_NAMESPACES
        or not all(isinstance(n, str) and len(n) <= NAMESPACE_MAX_CHARS for n in raw)
    ):
        raise BadRequest(f"namespaces must be a list of 1..{MAX_NAMESPACES} namespace names")
    return list(dict.fromkeys(normalize_namespace(n) for n in raw))


@dataclass(frozen=True)
class Scored:
    """The reranker's [0, 1] relevance per memory id and the raw scores' kind."""

    relevance: dict[str, float]  # of each memory's text: what the gates are calibrated on
    kind: str
    # each memory as search reads it: a memory in another script than the query that its
    # writer named, as named (``named_readings``); ranks the memories against each other
    read: dict[str, float]

    def strong(self, memory_id: str) -> bool:
        level = STRONG_RELEVANCE_BY_KIND.get(self.kind)
        if level is None or memory_id not in self.relevance:
            return False
        return self.relevance[memory_id] >= relevance_of(level, self.kind)


def asked_about(query: str, anchor: dict[str, Any], keys: list[dict[str, Any]]) -> str:
    """The query without the anchor key's words, the entities it names and the keys it names
    literally (the key path already accounts for those words): what it asks."""
    named = [anchor] + [
        k
        for k in keys
        if k.get("key_type") in ENTITY_KEY_TYPES or k.get("match_type") in LITERAL_MATCHES
    ]
    entities = [
        Entity(str(k["key_id"]), tuple(s for s in [k["concept"], *(k.get("aliases") or [])] if s))
        for k in named
    ]
    return without_entities(query, entities)


class Navigation:
    def __init__(self, client: Client) -> None:
        self.client = client

    def _call(self, service: str, method: str, body: Any) -> Any:
        return self.client.call(service, method, body, timeout_ms=remaining_ms(DEFAULT_BUDGET_MS))

    def _views(self, ids: list[str], namespace: str) -> dict[str, dict[str, Any]]:
        """The graph's full views of these memories (content, keys, validity), by id."""
        if not ids:
            return {}
        found = self._call("graph", "get_memories", {"ids": ids, "namespace": namespace})
        return {m["id"]: m for m in found["memories"]}

    def _relevance(self, query: str, views: dict[str, dict[str, Any]]) -> dict[str, float] | None:
        """Reranker relevance of each memory to ``query``; None when it cannot be had."""
        if not views:
            return {}
        members = list(views.values())
        body, named = scoring(query, members)
        try:
            scored = _scored(
                [m["id"] for m in members], self._call("reranker", "score", body), named
            )
        except KeymemError:
            return None
        return None if scored is None else scored.read

    def read_key(self, body: Any) -> Any:
        if not isinstance(body, dict):
            raise BadRequest(f"body must be a map, got {type(body).__name__}")
        query = _text(body, "query")
        if query is None:
            return self._call("graph", "read_key", body)
        plain = {k: v for k, v in body.items() if k not in ("query", "offset", "limit")}
        pool = self._call("graph", "read_key", {**plain, "limit": RERANK_POOL})
        views = self._views([h["memory_id"] for h in pool["memories"]], pool["key"]["namespace"])
        relevance = self._relevance(query, views)
        if relevance is None:
            return self._call("graph", "read_key", {k: v for k, v in body.items() if k != "query"})
        ranked = {k: v for k, v in body.items() if k != "query"}
        return self._call("graph", "read_key", {**ranked, "relevance": relevance})

    # -- recall ---------------------------------------------------------------------------
    def recall(self, body: Any) -> dict[str, Any]:
        """Recall in one namespace, or in several (``namespaces``) merged into one answer."""
        request = RecallRequest.parse(body)
        if not request.namespaces:
            return self._recall_in(request)
        replies = [
            self._recall_in(replace(request, namespace=space, namespaces=()))
            for space in request.namespaces
        ]
        return merged(request, replies)

    def _recall_in(self, request: RecallRequest) -> dict[str, Any]:
        """Four rounds: embedder ∥ lexicon search (query, context) → lexicon coverage of the
        hits → the graph's ``navigate`` → reranker ∥ lexicon coverage of the preview pool."""
        texts = [request.query] + ([request.context] if request.context else [])
        budget = int(remaining_ms(DEFAULT_BUDGET_MS) * ANALYSE_SHARE)
        embedded, *searched = self.client.call_many(
            [
                ("embedder", "embed", {"texts": [request.query], "kind": "query"}),
                *(
                    (
                        "lexicon",
                        "search",
                        {"query": text, "namespace": request.namespace, "top_n": CONTENT_HITS},
                    )
                    for text in texts
                ),
            ],
            timeout_ms=budget,
        )
        degraded = [
            name
            for name, out in (("embedder", embedded), ("lexicon", searched[0]))
            if isinstance(out, KeymemError)
        ]
        graph_body: dict[str, Any] = {
            "namespace": request.namespace,
            "text": request.query,
            "top_k": request.top_k,
            "pool": RERANK_POOL,
            "explain": request.explain,
            "content": self._content_hits(texts, searched, request.namespace),
        }
        vector = None if isinstance(embedded, KeymemError) else embedded["vectors"][0]
        if vector is not None:
            graph_body["vector"] = vector
        found = self._call("graph", "navigate", graph_body)
        keys = found["keys"]
        reply: dict[str, Any] = {"query": request.query, "namespace": request.namespace}
        if request.explain:
            reply["explain"] = {
                "namespaces": found["counts"],
                "empty_namespace": found["counts"].get(request.namespace, {}).get("memories", 0)
                == 0,
                "degraded": degraded,
            }
        if not keys:
            return {
                **reply,
                "status": "no_match",
                "keys": [],
                "memories": [],
                "nearest_keys": [key_summary(k) for k in found.get("nearest_keys", [])],
                "note": MISS_NOTE,
            }
        preview, withheld = self._preview(request, keys, found["members"])
        answer = {
            **reply,
            "status": "found",
            "keys": [{**key_summary(k), "merged_keys": k["merged_keys"]} for k in keys],
            "memories": [] if preview is None else [preview],
        }
        if withheld is not None:
            answer["note"] = f"No preview under {keys[0]['concept']!r}: {withheld}."
        return answer

    def _content_hits(
        self, texts: list[str], searched: Sequence[Any], namespace: str
    ) -> list[dict[str, Any]]:
        """Memories whose words hold the query or a sentence of the context, best first, with
        the share they hold (``CONTENT_GATE`` and up)."""
        calls: list[tuple[str, str, Any]] = []
        for text, hits in zip(texts, searched, strict=True):
            if isinstance(hits, KeymemError) or not hits["hits"]:
                continue
            ids = [h["id"] for h in hits["hits"]]
            for segment in rerank_segments(text):
                body = {"query": segment, "namespace": namespace, "ids": ids}
                calls.append(("lexicon", "coverage", body))
        if not calls:
            return []
        best: dict[str, float] = {}
        outcomes = self.client.call_many(calls, timeout_ms=remaining_ms(DEFAULT_BUDGET_MS) // 2)
        for (_, _, body), outcome in zip(calls, outcomes, strict=True):
            if isinstance(outcome, KeymemError):
                continue
            for memory_id, share in zip(body["ids"], outcome["coverage"], strict=True):
                if share is not None and share >= CONTENT_GATE:
                    best[memory_id] = max(share, best.get(memory_id, 0.0))
        ranked = sorted(best.items(), key=lambda hit: -hit[1])
        return [{"id": memory_id, "score": share} for memory_id, share in ranked]

    def _preview(
        self, request: RecallRequest, keys: list[dict[str, Any]], members: list[dict[str, Any]]
    ) -> tuple[dict[str, Any] | None, str | None]:
        """The best member of the strongest key that passes the gates, or why none did."""
        if not members:
            return None, None
        anchor = keys[0]
        ids = [m["id"] for m in members]
        asked = asked_about(request.query, anchor, keys)
        texts = [text for text in (request.query, request.context) if text]
        readings = [scoring(text, members) for text in texts]
        calls: list[tuple[str, str, Any]] = [("reranker", "score", body) for body, _ in readings]
        if re.search(r"\w", asked):
            body = {"query": asked, "namespace": request.namespace, "ids": ids}
            calls.append(("lexicon", "coverage", body))
        outcomes = self.client.call_many(calls, timeout_ms=remaining_ms(DEFAULT_BUDGET_MS))
        if not isinstance(outcomes[0], KeymemError) and not outcomes[0]["gate"]["passed"]:
            return None, WITHHELD["not_found"]
        on_query = _scored(ids, outcomes[0], readings[0][1])
        on_context = _scored(ids, outcomes[1], readings[1][1]) if request.context else on_query
        coverage: dict[str, float] | None = None
        # Terms left after the lexicon drops function words: none means nothing is asked.
        if (
            calls[-1][0] == "lexicon"
            and not isinstance(outcomes[-1], KeymemError)
            and outcomes[-1]["terms"]
        ):
            shares = zip(ids, outcomes[-1]["coverage"], strict=True)
            coverage = {i: share for i, share in shares if share is not None}
        tokens = structured_tokens(request.query)
        entities = named_entities(request.query, keys)
        reasons: list[str] = []
        passing = []
        for member in members:
            reason = _withheld(member, anchor, tokens, on_query, coverage, request.query)
            if reason is None and not _about(member, entities):
                reason = "other_entity"
            if reason is None:
                passing.append(member)
            else:
                reasons.append(reason)
        if not passing:
            why = reasons[0] if reasons else "low_coverage"
            return None, WITHHELD[why].format(tokens=", ".join(tokens))
        ranking = on_context.read if on_context is not None else {}
        best = max(
            passing,
            key=lambda m: (ranking.get(m["id"], 1.0) * m["link_rank"], m["created_at"]),
        )
        return _shown(best, anchor, ranking, request.max_chars), None


def _best_key_score(reply: dict[str, Any]) -> float:
    return max((k["score"] or 0.0 for k in reply["keys"]), default=0.0)


def merged(request: RecallRequest, replies: list[dict[str, Any]]) -> dict[str, Any]:
    """Several namespaces' recalls as one: their keys by score (each names its namespace), and
    the preview of the namespace whose strongest key is the strongest of those with one."""
    by_strength = sorted(replies, key=lambda r: -_best_key_score(r))
    keys = sorted((k for r in replies for k in r["keys"]), key=lambda k: -(k["score"] or 0.0))
    answer: dict[str, Any] = {
        "query": request.query,
        "namespace": request.namespace,
        "namespaces": list(request.namespaces),
        "status": "found" if keys else "no_match",
        "keys": keys[: request.top_k],
        "memories": next((r["memories"] for r in by_strength if r["memories"]), []),
    }
    if not keys:
        nearest = [k for r in replies for k in r.get("nearest_keys", [])]
        answer["nearest_keys"] = sorted(nearest, key=lambda k: -(k["score"] or 0.0))
        answer["note"] = MISS_NOTE
    elif not answer["memories"] and "note" in by_strength[0]:
        answer["note"] = by_strength[0]["note"]
    if request.explain:
        explained = [r["explain"] for r in replies]
        answer["explain"] = {
            "namespaces": {ns: c for e in explained for ns, c in e["namespaces"].items()},
            "empty_namespace": all(e["empty_namespace"] for e in explained),
            "degraded": sorted({name for e in explained for name in e["degraded"]}),
        }
    return answer


def scoring(text: str, members: list[dict[str, Any]]) -> tuple[dict[str, Any], list[int]]:
    """The reranker's body for ``text`` over ``members`` read as search reads them: each text,
    then each named one of them (``named_readings``) as named; and which those are."""
    named = named_readings(text, members)
    passages = [m["content"] for m in members] + [
        named_text(members[i]["about"], members[i]["content"]) for i in named
    ]
    return {"query": text, "passages": passages}, named


def _scored(ids: list[str], outcome: Any, named: list[int]) -> Scored | None:
    if isinstance(outcome, KeymemError):
        return None
    kind = str(outcome["score_kind"])
    scores = [relevance_of(s, kind) for s in outcome["scores"]]
    relevance = dict(zip(ids, scores[: len(ids)], strict=True))
    read = dict(relevance)
    for at, i in enumerate(named):
        read[ids[i]] = scores[len(ids) + at]
    return Scored(relevance, kind, read)


def _about(member: dict[str, Any], entities: list[Entity]) -> bool:
    """Inject's subject check on a preview: when the query names a person, the member is
    about that person (its text names them first among the persons it is filed under)."""
    filed = {**member, "matched_keys": [k["key_id"] for k in member["keys"]]}
    return about_entities(filed, entities, True, subject_of(member["content"], member["keys"]))


def _withheld(
    member: dict[str, Any],
    anchor: dict[str, Any],
    tokens: list[str],
    scored: Scored | None,
    coverage: dict[str, float] | None,
    query: str,
) -> str | None:
    """Why ``member`` may not be previewed under ``anchor`` (None: it may). Without the
    reranker or the lexicon, the gates that need them stand aside."""
    content = member["content"].lower()
    if any(token not in content for token in tokens):
        return "missing_token"
    strong = scored is not None and scored.strong(member["id"])
    if anchor.get("match_type") == "content" and scored is not None and not strong:
        return "no_anchor"
    if not scripts_of(query) & scripts_of(content):
        # No word can be shared across scripts: a key the query names (concept or alias) is
        # the anchor the memory was filed under; one reached by meaning is judged by the
        # relevance, as in inject.
        if anchor.get("match_type") in LITERAL_MATCHES:
            return None
        if scored is not None and member["id"] in scored.relevance:
            floor = CROSS_SCRIPT_RELEVANCE_BY_KIND.get(scored.kind)
            if floor is not None and scored.relevance[member["id"]] < relevance_of(
                floor, scored.kind
            ):
                return "low_relevance"
        return None
    share = None if coverage is None else coverage.get(member["id"])
    if share is not None and share < MIN_COVERAGE and not strong:
        return "low_coverage"
    return None


def _shown(
    member: dict[str, Any], anchor: dict[str, Any], ranking: dict[str, float], max_chars: int
) -> dict[str, Any]:
    """The preview as the tool returns it; its keys most related to the query first."""
    connected = [k for k in member["keys"] if k["key_id"] != anchor["key_id"]]
    connected.sort(key=lambda k: (-(k.get("relevance") or 0.0), -k["weight"]))
    content = member["content"]
    return {
        "id": member["id"],
        "content": content[:max_chars],
        "truncated": len(content) > max_chars,
        "content_chars": len(content),
        "evidence": "passive_preview",
        "reinforced": False,
        "namespace": member["namespace"],
        "depth": member["depth"],
        "created_at": member["created_at"],
        "validity": member["validity"],
        "content_relevance": ranking.get(member["id"]),
        "matched_key": {"key_id": anchor["key_id"], "concept": anchor["concept"]},
        "connected_keys": [
            {
                "key_id": k["key_id"],
                "concept": k["concept"],
                "relevance": k.get("relevance"),
                "link_weight": k["weight"],
            }
            for k in connected
        ],
    }
