"""What the reranker reads from its environment, parsed once at start."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from keymem.services.embedder.settings import (
    DEFAULT_THREADS,
    env_bool,
    env_float,
    env_int,
    env_path,
    env_str,
)

DEFAULT_CACHE_ENTRIES = 20_000


@dataclass(frozen=True)
class RerankerSettings:
    enabled: bool = True
    # A cross-encoder: an existing directory, or a registry name to download.
    model_path: Path | None = None
    model: str | None = None
    # Not-found gate on the top score, in the units of the active score kind; None = no gate.
    min_score: float | None = None
    threads: int = DEFAULT_THREADS
    cache_entries: int = DEFAULT_CACHE_ENTRIES

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RerankerSettings:
        env = os.environ if env is None else env
        return cls(
            enabled=env_bool(env, "KEYMEM_RERANK", True),
            model_path=env_path(env, "KEYMEM_RERANK_MODEL_PATH"),
            model=env_str(env, "KEYMEM_RERANK_MODEL"),
            min_score=env_float(env, "KEYMEM_RERANK_MIN_SCORE"),
            threads=env_int(env, "KEYMEM_RERANK_THREADS", DEFAULT_THREADS, minimum=1),
            cache_entries=env_int(env, "KEYMEM_RERANK_CACHE", DEFAULT_CACHE_ENTRIES),
        )

    @property
    def uses_cross_encoder(self) -> bool:
        return self.model_path is not None or self.model is not None
