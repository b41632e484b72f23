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
from keymem.services.config import AUTO_MIGRATE, Settings
from keymem.services.memory.migration import migrate_if_needed, spaces
from keymem.services.supervision import Difference, Supervision, SupervisionError


class ModelMismatch(SupervisionError):
    """The services run, but the graph's keys were embedded by another model (writes refused)."""


@dataclass(frozen=True)
class Launch:
    started: bool  # True: this call started supervisord; False: it was already running
    elapsed_s: float
    # Settings the (already) running services read with other values than this launcher's.
    differences: list[Difference]

    def describe_differences(self) -> str:
        return "\n".join(
            [
                "the running services use other settings than this launcher:",
                *(f"  {d.describe()}" for d in self.differences),
                "`keymem up --restart` restarts them with this launcher's settings.",
            ]
        )


def ensure_up(
    settings: Settings,
    *,
    timeout_s: float | None = None,
    announce: Callable[[str], None] | None = None,
    restart: bool = False,
) -> Launch:
    """Start the supervised services unless running, wait until ready, check the model space.

    ``restart`` stops running services first, so they start with this launcher's settings;
    otherwise the ones they run with and differ are reported in ``Launch.differences``.
    ``timeout_s`` defaults to KEYMEM_UP_TIMEOUT_S. ``announce`` is told, once, when this call
    is the one that starts the services (callers print it on stderr). Raises
    ``SupervisionError`` (a ``ModelMismatch`` for the model check) with a message naming the
    log to read; a keymem error during the model check is wrapped.
    """
    supervision = Supervision(settings)
    begun = time.monotonic()
    with supervision.lock():
        if restart:
            supervision.shutdown()
        if announce is not None and supervision.supervisord_pid() is None:
            announce(
                f"keymem: starting the background services (home {settings.home}; "
                f"logs in {settings.log_dir})"
            )
        started = supervision.start()
        differences = [] if started else supervision.differences()
        supervision.wait_ready(timeout_s)
        try:
            with Client(settings.endpoints.frontend) as client:
                found = spaces(client)
                if found.mismatch and not settings.config[AUTO_MIGRATE]:
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
    return Launch(started, time.monotonic() - begun, differences)
