"""The store commands' road to the running services, and where an id lives.

``list``, ``show``, ``search``, ``forget``, ``stats`` and ``namespaces`` ask the router like
any other client. A namespace is a boundary on the wire (every by-id request names one), so
``locate`` asks each namespace in turn for the ids the user typed: the operator owns them all.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_path
from keymem.protocol.errors import KeymemError
from keymem.services.config import Settings

CALL_TIMEOUT_MS = 30_000


class StoreError(Exception):
    """A store command cannot go on; the message is one line for the user."""


StoreCommand = Callable[[argparse.Namespace, Settings], int]


def store_command(name: str) -> Callable[[StoreCommand], Callable[[argparse.Namespace], int]]:
    """A command's ``run``: the settings read, a ``StoreError`` printed as one line (exit 1)."""

    def wrap(command: StoreCommand) -> Callable[[argparse.Namespace], int]:
        def run(args: argparse.Namespace) -> int:
            try:
                return command(args, Settings.from_env())
            except StoreError as exc:
                print(f"keymem {name}: {exc}", file=sys.stderr)
                return 1

        return run

    return wrap


def ask(settings: Settings, service: str, method: str, body: dict[str, Any]) -> Any:
    """One call through the router; keymem down or a typed error becomes a ``StoreError``."""
    socket_file = ipc_path(settings.endpoints.frontend)
    if socket_file is not None and not socket_file.exists():
        raise StoreError(f"keymem is not running in {settings.home} (start it: keymem up)")
    try:
        with Client(settings.endpoints.frontend, timeout_ms=CALL_TIMEOUT_MS) as client:
            return client.call(service, method, body, retry=True)
    except KeymemError as exc:
        raise StoreError(f"{exc.code.value}: {exc.message}") from exc


def counts(settings: Settings, *, detail: bool = False) -> dict[str, Any]:
    found: dict[str, Any] = ask(settings, "memory", "counts", {"detail": detail})
    return found


def locate(settings: Settings, ids: list[str], namespace: str | None) -> dict[str, str]:
    """The namespace of each id found (superseded versions too), searching ``namespace`` or,
    when it is None, every namespace."""
    spaces = [namespace] if namespace else sorted(counts(settings)["namespaces"])
    where: dict[str, str] = {}
    for space in spaces:
        missing = [i for i in ids if i not in where]
        if not missing:
            break
        found = ask(
            settings,
            "memory",
            "get_memories",
            {"ids": missing, "namespace": space, "include_inactive": True},
        )
        where.update({m["id"]: m["namespace"] for m in found["memories"]})
    return where


def unknown(ids: list[str], where: dict[str, str], namespace: str | None) -> StoreError:
    scope = f"namespace {namespace!r}" if namespace else "any namespace"
    return StoreError(f"no memory {', '.join(i for i in ids if i not in where)} in {scope}")
