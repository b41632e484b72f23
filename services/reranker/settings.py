"""What the reranker reads of keymem's settings (services/config.py), taken once at start."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from keymem.services import config as cfg
from keymem.services.config import Config
from keymem.services.embedder.settings import DEFAULT_THREADS

DEFAULT_CACHE_ENTRIES: int = cfg.RERANK_CACHE.default


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
    def from_config(cls, config: Config) -> RerankerSettings:
        return cls(
            enabled=config[cfg.RERANK],
            model_path=config[cfg.RERANK_MODEL_PATH],
            model=config[cfg.RERANK_MODEL],
            min_score=config[cfg.RERANK_MIN_SCORE],
            threads=config[cfg.RERANK_THREADS],
            cache_entries=config[cfg.RERANK_CACHE],
        )

    @property
    def uses_cross_encoder(self) -> bool:
        return self.model_path is not None or self.model is not None
