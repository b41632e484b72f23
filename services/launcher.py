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
from keymem.protocol.errors import BadRequest, ErrorCode, KeymemError, is_transient
from keymem.services import keys
from keymem.services.config import AUTO_MIGRATE, UP_TIMEOUT_S, Settings
from keymem.services.identity import Identity, this_install
from keymem.services.memory.migration import migrate_if_needed, spaces
from keymem.services.supervision import (
    PING_TIMEOUT_MS,
    Difference,
    Supervision,
    SupervisionError,
)

IDENTITY_POLL_S = 0.05


class ModelMismatch(SupervisionError):
    """The services run, but the graph's keys were embedded by another model (writes refused)."""


@dataclass(frozen=True)
class Launch:
    started: bool  # True: this call started supervisord; False: it was already running
    elapsed_s: float
    # Settings the (already) running services read with other values than this launcher's.
    differences: list[Difference]
    # Set when this call restarted services that ran another keymem: what they ran, and this.
    replaced: str | None = None

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
    identity: Identity | None = None,
) -> Launch:
    """Start the supervised services unless running, wait until ready, check the model space.

    ``restart`` stops running services first, so they start with this launcher's settings;
    otherwise the ones they run with and differ are reported in ``Launch.differences``.
    ``timeout_s`` defaults to KEYMEM_UP_TIMEOUT_S. ``announce`` is told, once, when this call
    is the one that starts the services (callers print it on stderr). Services of another
    keymem than ``identity`` (this install's when None: version and path) are restarted from
    this one (``Launch.replaced``; ``announce`` is told). Raises
    ``SupervisionError`` (a ``ModelMismatch`` for the model check) with a message naming the
    log to read; a keymem error during the model check is wrapped.
    """
    begun = time.monotonic()
    if settings.endpoints.secure and keys.router_elsewhere(settings.home):
        return _reach_remote_router(settings, timeout_s, begun)
    supervision = Supervision(settings)
    with supervision.lock():
        if restart:
            supervision.shutdown()
        if announce is not None and supervision.supervisord_pid() is None:
            announce(
                f"keymem: starting the background services (home {settings.home}; "
                f"logs in {settings.log_dir})"
            )
        started = supervision.start()
        here = identity or this_install()
        other = None if started else _other_keymem(settings, here, timeout_s)
        replaced = None
        if other is not None:
            replaced = (
                f"the running services were {other.describe()}; this is {here.describe()}: "
                "restarted them from here"
            )
            if announce is not None:
                announce(f"keymem: {replaced}")
            supervision.shutdown()
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
    return Launch(started, time.monotonic() - begun, differences, replaced)


def _reach_remote_router(settings: Settings, timeout_s: float | None, begun: float) -> Launch:
    """A front end on another host than the router starts nothing: it waits (bounded) until
    the router's ``memory`` service answers under this host's key."""
    timeout_s = settings.config[UP_TIMEOUT_S] if timeout_s is None else timeout_s
    last: KeymemError | None = None
    with Client(settings.endpoints.frontend, timeout_ms=PING_TIMEOUT_MS) as client:
        while time.monotonic() - begun < timeout_s:
            try:
                client.call("memory", "ping")
                return Launch(False, time.monotonic() - begun, [])
            except KeymemError as exc:
                last = exc
                if not is_transient(exc) and exc.code != ErrorCode.TIMEOUT:
                    break
                time.sleep(IDENTITY_POLL_S)
    raise SupervisionError(f"the router at {settings.endpoints.frontend} did not answer: {last}")


def _other_keymem(settings: Settings, here: Identity, timeout_s: float | None) -> Identity | None:
    """The running router's identity if it is not ``here`` (a router too old to have the
    ``version`` method counts as another); None when it is, or when the router does not
    answer in time (``wait_ready`` then reports why)."""
    give_up = time.monotonic() + (settings.config[UP_TIMEOUT_S] if timeout_s is None else timeout_s)
    with Client(settings.endpoints.frontend, timeout_ms=PING_TIMEOUT_MS) as client:
        while time.monotonic() < give_up:
            try:
                running = Identity.from_wire(client.call("router", "version"))
            except BadRequest:
                running = Identity.from_wire(None)
            except KeymemError:
                time.sleep(IDENTITY_POLL_S)
                continue
            return None if running == here else running
    return None
