"""Inject: what the prompt-submit hook surfaces, precision before recall.

The hook puts its result in front of the model on every prompt, unasked, so a wrong memory
costs more than a missing one. Inject runs hybrid search (hops 2, nothing reinforced) and keeps
a candidate only when

* the graph connects it to the prompt (a matched key, a literal name, or a hop) — a BM25-only
  hit shares words, not meaning;
* every structured token of the prompt (a version like 3.11.2, an issue like #123, a hash)
  appears in it verbatim — "3.11.2" must not surface a note about 3.12;
* its reranker relevance reaches the floor for that score kind, so an unrelated prompt surfaces
  nothing.

Then it takes the top few and cuts each preview and the whole block to a size budget.
"""

from __future__ import annotations

import os
import re
from typing import Any

from protocol.errors import BadRequest
from services.router.recall import Recall

TOP_K_DEFAULT = 2
MAX_CHARS_DEFAULT = 2_000
MAX_CHARS_RANGE = (256, 20_000)
PREVIEW_CHARS = 400
MAX_NAMESPACES = 8
# Relevance floors per reranker score kind. Uncalibrated first guesses for the offline
# default (USE-m query/passage cosine) and for cross-encoder logits (sigmoid 0.5);
# KEYMEM_INJECT_MIN_RELEVANCE overrides whichever kind is in use.
MIN_RELEVANCE_BY_KIND = {"embedding_cosine": 0.3, "cross_encoder_logit": 0.0}
STRUCTURED_TOKEN = re.compile(
    r"(?<![\w.])\d+(?:\.\d+){2,}(?![\w.])"  # versions with at least three parts: 3.11.2
    r"|(?<!\w)#\d+\b"  # issue and PR numbers: #123
    r"|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b",  # hex hashes: a1b2c3d
    re.IGNORECASE,
)


def structured_tokens(text: str) -> list[str]:
    return [m.group(0).lower() for m in STRUCTURED_TOKEN.finditer(text)]


def relevance_floor(score_kind: str) -> float | None:
    override = os.environ.get("KEYMEM_INJECT_MIN_RELEVANCE", "").strip()
    if override:
        return float(override)
    return MIN_RELEVANCE_BY_KIND.get(score_kind)


def graph_connected(candidate: dict[str, Any]) -> bool:
    parts = candidate["components"]
    return parts["key_rank"] is not None or parts["literal"] or parts["hop"] > 0


class Inject:
    def __init__(self, recall: Recall) -> None:
        self.recall = recall

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
        top_k = body.get("top_k", TOP_K_DEFAULT)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 10:
            raise BadRequest("top_k must be an integer in [1, 10]")
        max_chars = body.get("max_chars", MAX_CHARS_DEFAULT)
        low, high = MAX_CHARS_RANGE
        if isinstance(max_chars, bool) or not isinstance(max_chars, int):
            raise BadRequest("max_chars must be an integer")
        max_chars = min(high, max(low, max_chars))

        required = structured_tokens(prompt)
        kept: list[dict[str, Any]] = []
        degraded: dict[str, str] = {}
        rejected = {"bm25_only": 0, "missing_token": 0, "below_floor": 0}
        for namespace in dict.fromkeys(namespaces):
            found = self.recall.search(
                {"query": prompt[:4_000], "namespace": namespace, "top_k": 10, "hops": 2}
            )
            degraded.update(found["degraded"])
            for candidate in found["memories"]:
                if not graph_connected(candidate):
                    rejected["bm25_only"] += 1
                    continue
                content = candidate["content"].lower()
                if any(token not in content for token in required):
                    rejected["missing_token"] += 1
                    continue
                floor = relevance_floor(candidate.get("rerank_kind", ""))
                if floor is not None and candidate.get("rerank_score", floor) < floor:
                    rejected["below_floor"] += 1
                    continue
                kept.append(candidate)
        kept.sort(key=lambda c: -c["score"])
        surfaced = []
        budget = max_chars
        for candidate in kept[:top_k]:
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
        return {
            "memories": surfaced,
            "required_tokens": required,
            "rejected": rejected,
            "degraded": degraded,
        }
