"""Which module builds which worker service: the one place that names them all.

A service process imports only its own module (each builder imports it when called): a
worker restarted after a crash pays for its own model and libraries, not for every other
service's (kill-to-answer time, docs/RELIABILITY.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from keymem.protocol.worker import Service
from keymem.services.config import WORKER_SERVICES, Settings


def _builder(name: str) -> Callable[[Settings], Service]:
    def build(settings: Settings) -> Service:
        service: Service = importlib.import_module(f"keymem.services.{name}").build(settings)
        return service

    return build


BUILDERS: dict[str, Callable[[Settings], Service]] = {n: _builder(n) for n in WORKER_SERVICES}
