"""What the embedder reads of keymem's settings (services/config.py), taken once at start."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from keymem.services import config as cfg
from keymem.services.config import Config

DEFAULT_BACKEND: str = cfg.EMBEDDING_BACKEND.default
DEFAULT_OPENAI_BASE_URL: str = cfg.OPENAI_BASE_URL.default
DEFAULT_OPENAI_MODEL: str = cfg.OPENAI_EMBEDDING_MODEL.default
DEFAULT_THREADS: int = cfg.EMBED_THREADS.default
DEFAULT_CACHE_ENTRIES: int = cfg.EMBED_CACHE.default


@dataclass(frozen=True)
class OpenAISettings:
    api_key: str | None
    base_url: str
    model: str


@dataclass(frozen=True)
class EmbedderSettings:
    backend: str = DEFAULT_BACKEND
    # onnx: a registry name (services.embedder.models.registry); unset means bge-m3, or the
    # directory's name when a path is given.
    local_model: str | None = None
    local_model_path: Path | None = None
    openai: OpenAISettings = OpenAISettings(None, DEFAULT_OPENAI_BASE_URL, DEFAULT_OPENAI_MODEL)
    threads: int = DEFAULT_THREADS
    cache_entries: int = DEFAULT_CACHE_ENTRIES
    # Coalesce concurrent requests into one model call (off only to measure what it buys).
    batching: bool = True

    @classmethod
    def from_config(cls, config: Config) -> EmbedderSettings:
        return cls(
            backend=config[cfg.EMBEDDING_BACKEND],
            local_model=config[cfg.LOCAL_EMBEDDING_MODEL],
            local_model_path=config[cfg.LOCAL_EMBEDDING_MODEL_PATH],
            openai=OpenAISettings(
                api_key=config[cfg.OPENAI_API_KEY],
                base_url=config[cfg.OPENAI_BASE_URL].rstrip("/"),
                model=config[cfg.OPENAI_EMBEDDING_MODEL],
            ),
            threads=config[cfg.EMBED_THREADS],
            cache_entries=config[cfg.EMBED_CACHE],
            batching=config[cfg.EMBED_BATCHING],
        )
