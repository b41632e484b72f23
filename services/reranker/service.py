"""The reranker service: scores a recall pool of passages against the query.

Stateless (invariant 3). With ``KEYMEM_RERANK=false`` it still starts (so supervision stays
simple and ``info`` can say why) but loads no model and answers ``score`` with a typed
``unavailable``; the router then ranks without it (invariant 5).
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Any

from keymem.protocol.errors import BadRequest, Unavailable
from keymem.protocol.limits import RERANK_MAX_PASSAGES, RERANK_QUERY_MAX_CHARS
from keymem.protocol.worker import Service
from keymem.services.config import Settings
from keymem.services.embedder.backends import EmbeddingBackend, fingerprint, load_backend
from keymem.services.embedder.requests import check_text, check_texts, cut, require_map
from keymem.services.embedder.settings import EmbedderSettings
from keymem.services.reranker.gate import Gate
from keymem.services.reranker.passages import PassageStore, store_dir
from keymem.services.reranker.scorers import EmbeddingCosineScorer, Scorer
from keymem.services.reranker.settings import RerankerSettings

log = logging.getLogger("keymem.reranker")

# Under KEYMEM_HOME, beside the USE-m start-up cache (cache/usem3)
PASSAGES_DIR = Path("cache") / "passages"

# Passages per request: a search's pool (64 by default; larger pools come in pieces), bounded
# so one call stays far inside the heartbeat window even with nothing cached.


class Reranker:
    def __init__(self, scorer: Scorer, config: RerankerSettings, load_seconds: float) -> None:
        self.scorer = scorer
        self.config = config
        self.gate = Gate(config.min_score)
        self.load_seconds = load_seconds

    def _passages(self, body: Any, fields: set[str]) -> tuple[dict[str, Any], list[str], set[int]]:
        body = require_map(body, " and ".join(f'"{f}"' for f in sorted(fields)))
        unknown = set(body) - fields
        if unknown:
            raise BadRequest(f"unknown field(s) {', '.join(sorted(map(str, unknown)))}")
        passages, cut_at = cut(
            check_texts(body.get("passages"), "passages", RERANK_MAX_PASSAGES),
            self.scorer.max_chars,
        )
        return body, passages, cut_at

    def score(self, body: Any) -> dict[str, Any]:
        body, passages, cut_at = self._passages(body, {"query", "passages"})
        query = check_text(body.get("query"), "query")[:RERANK_QUERY_MAX_CHARS]
        scores, truncated = self.scorer.score(query, passages)
        return {
            "scores": scores,
            "score_kind": self.scorer.score_kind,
            "model": self.scorer.model,
            "gate": self.gate.judge(query, passages, scores),
            "truncated": sorted(cut_at | truncated),
        }

    def warm(self, body: Any) -> dict[str, Any]:
        """Prepare passages before any query needs them (e.g. right after a memory is written),
        so the first recall that pools them pays no model time for them. With ``vectors``
        true, a scorer that reads passages as embeddings answers with their heads' vectors
        (float32, one row each) and the embedder's ``fingerprint`` too: the graph's memory
        vectors, made by the same model call (services/memory/warmup.py)."""
        body, passages, _ = self._passages(body, {"passages", "vectors"})
        wants = body.get("vectors", False)
        if not isinstance(wants, bool):
            raise BadRequest("vectors must be true or false")
        if wants and isinstance(self.scorer, EmbeddingCosineScorer):
            vectors, cached = self.scorer.head_vectors(passages)
            return {
                "cached": cached,
                "score_kind": self.scorer.score_kind,
                "vectors": vectors,
                "fingerprint": self.scorer.model,
            }
        return {"cached": self.scorer.warm(passages), "score_kind": self.scorer.score_kind}

    def info(self, body: Any = None) -> dict[str, Any]:
        return {
            "enabled": True,
            "score_kind": self.scorer.score_kind,
            "model": self.scorer.model,
            "min_score": self.config.min_score,
            "limits": {
                "max_passages": RERANK_MAX_PASSAGES,
                "max_passage_chars": self.scorer.max_chars,
                "max_query_chars": RERANK_QUERY_MAX_CHARS,
            },
            "load_seconds": round(self.load_seconds, 3),
        }


def load_scorer(
    settings: Settings, config: RerankerSettings, backend: EmbeddingBackend | None = None
) -> Scorer:
    """The configured scorer; the embedding cosine one on ``backend`` when given (the embedding
    model the embedder of this process already loaded, services/shared_model.py)."""
    if config.uses_cross_encoder:
        from keymem.services.embedder.models.runtime import require_models_extra

        require_models_extra("a cross-encoder (KEYMEM_RERANK_MODEL or KEYMEM_RERANK_MODEL_PATH)")
        from keymem.services.reranker.cross_encoder import load_cross_encoder

        return load_cross_encoder(config.model, config.model_path, settings.home, config.threads)
    if backend is None:
        backend = load_backend(EmbedderSettings.from_config(settings.config), settings.home)
    return EmbeddingCosineScorer(
        backend, config.cache_entries, open_store(settings.home, backend, config)
    )


def open_store(
    home: Path, backend: EmbeddingBackend, config: RerankerSettings
) -> PassageStore | None:
    """The passage vectors kept in ``home`` for this model; none with the cache off
    (``KEYMEM_RERANK_CACHE=0``) or when the directory cannot be used (said in the log). Another
    model's vectors (a home's model switched, ``keymem migrate``) are never read again: removed."""
    if config.cache_entries <= 0:
        return None
    directory = store_dir(home / PASSAGES_DIR, fingerprint(backend))
    try:
        for other in (home / PASSAGES_DIR).glob("*"):
            if other != directory:
                shutil.rmtree(other)
        return PassageStore(directory, backend.dim, config.cache_entries)
    except OSError as exc:
        log.warning("no passage store at %s, vectors kept in memory only: %s", directory, exc)
        return None


def make_service(reranker: Reranker) -> Service:
    service = Service("reranker")
    service.add("score", reranker.score, idempotent=True)
    service.add("warm", reranker.warm, idempotent=True)
    service.add("info", reranker.info, idempotent=True)
    return service


def disabled_service(config: RerankerSettings) -> Service:
    service = Service("reranker")

    def score(body: Any) -> Any:
        raise Unavailable(
            "reranking is disabled (KEYMEM_RERANK=false); rank without it",
            {"disabled": True},
        )

    def info(body: Any) -> dict[str, Any]:
        return {"enabled": False, "reason": "KEYMEM_RERANK=false"}

    service.add("score", score, idempotent=True)
    service.add("warm", score, idempotent=True)
    service.add("info", info, idempotent=True)
    return service


def build(
    settings: Settings,
    reranker_settings: RerankerSettings | None = None,
    backend: EmbeddingBackend | None = None,
) -> Service:
    config = reranker_settings or RerankerSettings.from_config(settings.config)
    if not config.enabled:
        log.info("reranker disabled by KEYMEM_RERANK=false")
        return disabled_service(config)
    started = time.perf_counter()
    scorer = load_scorer(settings, config, backend)
    reranker = Reranker(scorer, config, time.perf_counter() - started)
    log.info(
        "reranker ready: %s (%s) in %.2f s", scorer.model, scorer.score_kind, reranker.load_seconds
    )
    service = make_service(reranker)
    if isinstance(scorer, EmbeddingCosineScorer):
        service.on_stop.append(scorer.close)
    return service
