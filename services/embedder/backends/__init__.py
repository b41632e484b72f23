"""Embedding backends behind one interface; ``load_backend`` picks the configured one."""

from __future__ import annotations

from pathlib import Path

from keymem.services.embedder.backends.base import EmbeddingBackend, Encoded, Kind, fingerprint
from keymem.services.embedder.settings import EmbedderSettings

__all__ = ["EmbeddingBackend", "Encoded", "Kind", "fingerprint", "load_backend"]


def load_backend(settings: EmbedderSettings, home: Path) -> EmbeddingBackend:
    """Load the model now (seconds), so a worker registers only once it can answer."""
    if settings.backend == "usem3":
        from keymem.services.embedder.backends.usem3 import Usem3Backend
        from keymem.services.embedder.backends.usem3_cache import cache_dir

        return Usem3Backend(settings.threads, cache_dir(home))
    if settings.backend == "onnx":
        from keymem.services.embedder.models.runtime import require_models_extra

        require_models_extra("EMBEDDING_BACKEND=onnx")
        from keymem.services.embedder.backends.onnx import load_onnx_backend

        return load_onnx_backend(
            settings.local_model,
            settings.local_model_path,
            home,
            settings.threads,
            "LOCAL_EMBEDDING_MODEL_PATH",
        )
    from keymem.services.embedder.backends.openai import OpenAIBackend

    return OpenAIBackend(settings.openai)
