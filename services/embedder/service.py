"""The embedder service: keys, queries and passages in, L2-normalised float32 vectors out.

Stateless (invariant 3): a model, a vector cache and counters, nothing else. ``embed`` is a
batch method: requests that queue up while the model is busy are answered by one model call
(one per kind), after the cache has taken out every text it already knows. That is where the
throughput under many clients comes from: USE-m embeds 32 keys in ~3x the time of one.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from keymem.protocol.errors import KeymemError
from keymem.protocol.worker import Service
from keymem.services.config import Settings
from keymem.services.embedder.backends import EmbeddingBackend, Kind, fingerprint, load_backend
from keymem.services.embedder.cache import Cached, VectorCache
from keymem.services.embedder.requests import (
    MAX_REQUEST_CHARS,
    MAX_TEXTS,
    EmbedRequest,
    parse_embed,
)
from keymem.services.embedder.settings import EmbedderSettings
from keymem.services.embedder.thresholds import ThresholdProfile, profile_for

log = logging.getLogger("keymem.embedder")

# Requests the router may keep outstanding on one worker: what a batch can grow to.
BATCH_CAPACITY = 32
MAX_BATCH_REQUESTS = 64
# Request bytes per model call; with MAX_REQUEST_CHARS this bounds one call well under a second.
MAX_BATCH_BYTES = 64 * 1024


class Embedder:
    def __init__(self, backend: EmbeddingBackend, cache_entries: int, load_seconds: float) -> None:
        self.backend = backend
        self.fingerprint = fingerprint(backend)
        self.thresholds: ThresholdProfile = profile_for(backend.model)
        self.cache = VectorCache(cache_entries)
        self.load_seconds = load_seconds
        self.model_calls = 0
        self.texts_embedded = 0

    def embed_many(self, bodies: list[Any]) -> list[Any]:
        """One result (or typed error) per body; all cache misses go to the model together."""
        parsed: list[EmbedRequest | KeymemError] = []
        for body in bodies:
            try:
                parsed.append(parse_embed(body, self.backend.max_chars))
            except KeymemError as exc:
                parsed.append(exc)
        known, failed = self._vectors_for([p for p in parsed if isinstance(p, EmbedRequest)])
        return [p if isinstance(p, KeymemError) else self._answer(p, known, failed) for p in parsed]

    def _vectors_for(
        self, requests: list[EmbedRequest]
    ) -> tuple[dict[tuple[Kind, str], Cached], dict[Kind, KeymemError]]:
        """Vectors for every text, and per kind the typed error if its model call failed.

        A failing model (an upstream API down) fails only the requests that needed it, once:
        retrying each body on its own would multiply the upstream's timeout by the batch size.
        """
        known: dict[tuple[Kind, str], Cached] = {}
        failed: dict[Kind, KeymemError] = {}
        missing: dict[Kind, list[str]] = {}
        queued: set[tuple[Kind, str]] = set()
        for request in requests:
            for text in request.texts:
                key = (request.kind, text)
                if key in known or key in queued:
                    continue
                found = self.cache.get(request.kind, text)
                if found is None:
                    queued.add(key)
                    missing.setdefault(request.kind, []).append(text)
                else:
                    known[key] = found
        for kind, texts in missing.items():
            try:
                encoded = self.backend.encode(texts, kind)
            except KeymemError as exc:
                failed[kind] = exc
                continue
            self.model_calls += 1
            self.texts_embedded += len(texts)
            for i, text in enumerate(texts):
                # a copy: a row view would keep the whole batch's array alive in the cache
                entry = Cached(encoded.vectors[i].copy(), i in encoded.truncated)
                known[(kind, text)] = entry
                self.cache.put(kind, text, entry)
        return known, failed

    def _answer(
        self,
        request: EmbedRequest,
        known: dict[tuple[Kind, str], Cached],
        failed: dict[Kind, KeymemError],
    ) -> dict[str, Any] | KeymemError:
        if all((request.kind, text) in known for text in request.texts):
            return self._reply(request, known)
        return failed[request.kind]

    def _reply(
        self, request: EmbedRequest, known: dict[tuple[Kind, str], Cached]
    ) -> dict[str, Any]:
        rows = [known[(request.kind, text)] for text in request.texts]
        vectors = np.stack([row.vector for row in rows])
        truncated = sorted(request.cut | {i for i, row in enumerate(rows) if row.truncated})
        return {
            "vectors": vectors,
            "dim": self.backend.dim,
            "fingerprint": self.fingerprint,
            "truncated": truncated,
        }

    def info(self, body: Any = None) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "dim": self.backend.dim,
            "backend": self.backend.name,
            "model": self.backend.model,
            "variant": self.backend.variant,
            "thresholds": self.thresholds.to_wire(),
            "limits": {
                "max_texts": MAX_TEXTS,
                "max_text_chars": self.backend.max_chars,
                "max_request_chars": MAX_REQUEST_CHARS,
            },
            "load_seconds": round(self.load_seconds, 3),
            "cache": {
                "entries": len(self.cache),
                "max_entries": self.cache.max_entries,
                "hits": self.cache.hits,
                "misses": self.cache.misses,
            },
            "model_calls": self.model_calls,
            "texts_embedded": self.texts_embedded,
        }


def load_embedder(
    settings: Settings, config: EmbedderSettings, backend: EmbeddingBackend | None = None
) -> Embedder:
    """An embedder on ``backend`` (a model another service of this process already loaded),
    or on the configured model, loaded now."""
    started = time.perf_counter()
    backend = backend or load_backend(config, settings.home)
    embedder = Embedder(backend, config.cache_entries, time.perf_counter() - started)
    log.info(
        "embedder ready: %s, dim %d, loaded in %.2f s",
        embedder.fingerprint,
        backend.dim,
        embedder.load_seconds,
    )
    return embedder


def make_service(embedder: Embedder, *, batching: bool = True) -> Service:
    """The worker-facing service around a loaded model (tests reuse one model this way)."""
    service = Service("embedder", capacity=BATCH_CAPACITY if batching else 1)
    service.add(
        "embed",
        embedder.embed_many,
        idempotent=True,
        batch=True,
        max_batch=MAX_BATCH_REQUESTS if batching else 1,
        max_batch_bytes=MAX_BATCH_BYTES,
    )
    service.add("info", embedder.info, idempotent=True)
    return service


def build(
    settings: Settings,
    embedder_settings: EmbedderSettings | None = None,
    backend: EmbeddingBackend | None = None,
) -> Service:
    config = embedder_settings or EmbedderSettings.from_config(settings.config)
    return make_service(load_embedder(settings, config, backend), batching=config.batching)
