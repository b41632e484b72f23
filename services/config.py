"""Settings every keymem process reads from its environment."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from keymem.protocol.endpoints import EndpointError, Endpoints, endpoints_from_env, keymem_home
from keymem.protocol.worker import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_HEARTBEAT_LIVENESS,
    HeartbeatPolicy,
)

WORKER_SERVICES = ("embedder", "reranker", "lexicon", "graph")
ALL_PROGRAMS = ("router", *WORKER_SERVICES)


class ConfigError(ValueError):
    """A setting in the environment that keymem cannot use; the message names it."""


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from exc


@dataclass(frozen=True)
class Settings:
    home: Path
    endpoints: Endpoints
    heartbeat: HeartbeatPolicy = field(default_factory=HeartbeatPolicy)

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @classmethod
    def from_env(cls) -> Settings:
        """Read the environment; raises ``ConfigError`` naming a bad variable."""
        home = keymem_home()
        heartbeat = HeartbeatPolicy(
            interval_ms=_int_env("KEYMEM_HEARTBEAT_MS", DEFAULT_HEARTBEAT_INTERVAL_MS),
            liveness=_int_env("KEYMEM_HEARTBEAT_LIVENESS", DEFAULT_HEARTBEAT_LIVENESS),
        )
        try:
            endpoints = endpoints_from_env(home)
        except EndpointError as exc:
            raise ConfigError(str(exc)) from exc
        return cls(home=home, endpoints=endpoints, heartbeat=heartbeat)
