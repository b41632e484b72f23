"""Key navigation, the default MCP flow: recall → read_key → read_memory.

``recall`` returns ranked key clusters and one passive preview: the best memory under the
strongest key, reranked against the query (or the caller's context). It changes nothing — no
access counts, no reinforcement, no confirmation. ``read_key`` with a query ranks a key's
memories by their relevance to it, so a hub is paged in a useful order. Relevance is the
reranker's score clipped to [0, 1] (a cosine, or a cross-encoder logit through a sigmoid), so it
can multiply a link weight; when the reranker is down the graph's link ranking stands.
"""

from __future__ import annotations

import math
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import BadRequest, KeymemError
from keymem.protocol.worker import remaining_ms
from keymem.services.graph.text import normalize_namespace
from keymem.services.memory.profile import EmbedderProfile
from keymem.services.memory.search import key_summary

DEFAULT_BUDGET_MS = 5_000
RECALL_TOP_K_DEFAULT = 8
RECALL_TOP_K_MAX = 20
RERANK_POOL = 30
NEAREST_KEYS = 3
PREVIEW_MAX_CHARS_DEFAULT = 2_000
# A memory whose text matches the query this well (bounded BM25, s / (1 + s)) lends its keys
# to the key list as "content" matches even when no key name or vector matched.
CONTENT_GATE = 0.5
MISS_NOTE = (
    "No key matched. nearest_keys are the closest concepts; try one of them with read_key, "
    "or recall with different words."
)


def relevance_of(score: float, score_kind: str) -> float:
    """A reranker score mapped onto [0, 1] so it can weigh a link."""
    if score_kind == "cross_encoder_logit":
        return 1.0 / (1.0 + math.exp(-score))
    return min(1.0, max(0.0, score))


def _text(body: dict[str, Any], name: str, required: bool = False) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{name} must be a non-empty string")
    return value


class Navigation:
    def __init__(self, client: Client, profile: EmbedderProfile) -> None:
        self.client = client
        self.profile = profile

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
        ordered = list(views)
        try:
            scored = self._call(
                "reranker",
                "score",
                {"query": query, "passages": [views[i]["content"] for i in ordered]},
            )
        except KeymemError:
            return None
        return {
            memory_id: relevance_of(score, scored["score_kind"])
            for memory_id, score in zip(ordered, scored["scores"], strict=True)
        }

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

    def recall(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise BadRequest(f"body must be a map, got {type(body).__name__}")
        query = _text(body, "query", required=True)
        assert query is not None
        context = _text(body, "context")
        namespace = normalize_namespace(_text(body, "namespace"))
        top_k = body.get("top_k", RECALL_TOP_K_DEFAULT)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 20:
            raise BadRequest(f"top_k must be an integer in [1, {RECALL_TOP_K_MAX}]")
        max_chars = body.get("max_chars", PREVIEW_MAX_CHARS_DEFAULT)
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
            raise BadRequest("max_chars must be a positive integer")

        embedded, lexical = self.client.call_many(
            [
                ("embedder", "embed", {"texts": [query], "kind": "query"}),
                ("lexicon", "search", {"query": query, "namespace": namespace, "top_n": 5}),
            ],
            timeout_ms=remaining_ms(DEFAULT_BUDGET_MS) // 2,
        )
        vector = None if isinstance(embedded, KeymemError) else embedded["vectors"][0]
        match: dict[str, Any] = {"namespace": namespace, "text": query, "top_k": top_k}
        if vector is not None:
            match["vector"] = vector
            thresholds = self.profile.thresholds(embedded["fingerprint"])
            if thresholds is not None:
                match["thresholds"] = thresholds
        keys = self._call("graph", "match_keys", match)["keys"]
        if not isinstance(lexical, KeymemError):
            keys = self._with_content_keys(keys, lexical["hits"], namespace, top_k)
        reply: dict[str, Any] = {"query": query, "namespace": namespace}
        if body.get("explain"):
            counts = self._call("graph", "counts", {})
            reply["explain"] = {
                "namespaces": counts["namespaces"],
                "empty_namespace": counts["namespaces"].get(namespace, {}).get("memories", 0) == 0,
                "degraded": [
                    name
                    for name, out in (("embedder", embedded), ("lexicon", lexical))
                    if isinstance(out, KeymemError)
                ],
            }
        if not keys:
            nearest: list[dict[str, Any]] = []
            if vector is not None:
                nearest = self._call(
                    "graph",
                    "match_keys",
                    {
                        "namespace": namespace,
                        "vector": vector,
                        "top_k": NEAREST_KEYS,
                        "min_cosine": -1.0,
                        "learn": False,
                    },
                )["keys"]
            return {
                **reply,
                "status": "no_match",
                "keys": [],
                "memories": [],
                "nearest_keys": [key_summary(k) for k in nearest],
                "note": MISS_NOTE,
            }
        preview = self._preview(keys[0], namespace, context or query, vector, max_chars)
        return {
            **reply,
            "status": "found",
            "keys": [key_summary(k) for k in keys],
            "memories": [] if preview is None else [preview],
        }

    def _with_content_keys(
        self, keys: list[dict[str, Any]], hits: list[dict[str, Any]], namespace: str, top_k: int
    ) -> list[dict[str, Any]]:
        strong = [h for h in hits if h["score"] / (1 + max(h["score"], 0.0)) >= CONTENT_GATE]
        if not strong:
            return keys
        seen = {k["key_id"] for k in keys}
        linked = self._call(
            "graph",
            "memory_keys",
            {"namespace": namespace, "memory_ids": [h["id"] for h in strong]},
        )["memories"]
        extra: list[dict[str, Any]] = []
        for hit in strong:
            relevance = hit["score"] / (1 + hit["score"])
            for key in linked.get(hit["id"], []):
                if key["key_id"] not in seen:
                    seen.add(key["key_id"])
                    extra.append({**key, "score": round(relevance, 4), "match_type": "content"})
        return (keys + extra)[:top_k]

    def _preview(
        self, key: dict[str, Any], namespace: str, query: str, vector: Any, max_chars: int
    ) -> dict[str, Any] | None:
        handles = self._call(
            "graph",
            "read_key",
            {"key_id": key["key_id"], "namespace": namespace, "limit": RERANK_POOL},
        )["memories"]
        if not handles:
            return None
        # fetched once: scored and shown
        views = self._views([h["memory_id"] for h in handles], namespace)
        if not views:
            return None  # every handle was superseded or forgotten in between
        relevance = self._relevance(query, views) or {}
        best = max(
            (h for h in handles if h["memory_id"] in views),
            key=lambda h: (relevance.get(h["memory_id"], 1.0) * h["score"], h["created_at"]),
        )
        full = views[best["memory_id"]]
        connected = [k for k in full["keys"] if k["key_id"] != key["key_id"]]
        cosines: dict[str, float] = {}
        if vector is not None:
            linked = self._call(
                "graph",
                "memory_keys",
                {"namespace": full["namespace"], "memory_ids": [full["id"]], "vector": vector},
            )["memories"][full["id"]]
            cosines = {k["key_id"]: k["relevance"] for k in linked if "relevance" in k}
        # the keys most related to the query first, so the agent's next hop is obvious
        connected.sort(key=lambda k: (-cosines.get(k["key_id"], 0.0), -k["link_weight"]))
        return {
            "id": full["id"],
            "content": full["content"][:max_chars],
            "evidence": "passive_preview",
            "reinforced": False,
            "namespace": full["namespace"],
            "depth": full["depth"],
            "created_at": full["created_at"],
            "validity": full["validity"],
            "content_relevance": relevance.get(full["id"]),
            "matched_key": {"key_id": key["key_id"], "concept": key["concept"]},
            "connected_keys": [
                {
                    "key_id": k["key_id"],
                    "concept": k["concept"],
                    "relevance": cosines.get(k["key_id"]),
                    "link_weight": k["link_weight"],
                }
                for k in connected
            ],
        }
