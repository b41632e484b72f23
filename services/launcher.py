"""Ensure keymem is up: the one start-up flow shared by ``keymem up`` and ``keymem mcp``.

Several agents may launch ``keymem mcp`` at the same moment, each finding the services down.
Under the control lock exactly one of them starts supervisord; the others wait on the lock, then
find it running. Every caller then waits (bounded) until each service answers, and checks that
the graph's key vectors live in the embedder's space (re-embedding them when allowed), so a
model switch never lets writes land in a mismatched space.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError
from keymem.services.config import Settings
from keymem.services.memory.migration import auto_migrate_enabled, migrate_if_needed, spaces
from keymem.services.supervision import READY_TIMEOUT_S, Supervision, SupervisionError


class ModelMismatch(SupervisionError):
    """The services run, but the graph's keys were embedded by another model (writes refused)."""


@dataclass(frozen=True)
class Launch:
    started: bool  # True: this call started supervisord; False: it was already running
    elapsed_s: float


def ensure_up(
    settings: Settings,
    *,
    timeout_s: float = READY_TIMEOUT_S,
    announce: Callable[[str], None] | None = None,
) -> Launch:
    """Start the supervised services unless running, wait until ready, check the model space.

    ``announce`` is told, once, when this call is the one that starts the services (callers
    print it on stderr). Raises ``SupervisionError`` (a ``ModelMismatch`` for the model check)
    with a message naming the log to read; a keymem error during the model check is wrapped.
    """
    supervision = Supervision(settings)
    begun = time.monotonic()
    with supervision.lock():
        if announce is not None and supervision.supervisord_pid() is None:
            announce(
                f"keymem: starting the background services (home {settings.home}; "
                f"logs in {settings.log_dir})"
            )
        started = supervision.start()
        supervision.wait_ready(timeout_s)
        try:
            with Client(settings.endpoints.frontend) as client:
                found = spaces(client)
                if found.mismatch and not auto_migrate_enabled():
                    raise ModelMismatch(
                        f"{found.describe()}. Writes are refused until the keys are re-embedded: "
                        "run `keymem migrate`, or unset KEYMEM_AUTO_MIGRATE=false."
                    )
                migrate_if_needed(client)
        except KeymemError as exc:
            raise SupervisionError(
                f"services are up but the model check failed: {exc}; "
                f"see {supervision.log_path('router')}"
            ) from exc
    return Launch(started=started, elapsed_s=time.monotonic() - begun)
