"""Which module builds which worker service: the one place that names them all.

A service process imports only its own module (each builder imports it when called): a
worker restarted after a crash pays for its own model and libraries, not for every other
service's (kill-to-answer time, docs/RELIABILITY.md). A service in ``PRELOADERS`` runs as a
parent that loads its model or libraries once and forks the worker (services/prefork.py): its
``preload`` returns what builds the service in the forked child. ``placement`` says which supervised
program runs which services: one each, except the embedder and the reranker sharing a process
and its model (services/shared_model.py) when they use the same one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from keymem.protocol.worker import Service
from keymem.services import shared_model
from keymem.services.config import ALL_PROGRAMS, WORKER_SERVICES, Config, Settings


def _builder(name: str) -> Callable[[Settings], Service]:
    def build(settings: Settings) -> Service:
        service: Service = importlib.import_module(f"keymem.services.{name}").build(settings)
        return service

    return build


BUILDERS: dict[str, Callable[[Settings], Service]] = {n: _builder(n) for n in WORKER_SERVICES}


def _preloader(name: str) -> Callable[[Settings], Callable[[], Service]]:
    def preload(settings: Settings) -> Callable[[], Service]:
        build: Callable[[], Service] = importlib.import_module(f"keymem.services.{name}").preload(
            settings
        )
        return build

    return preload


# The lexicon's start is Kiwi's model load (seconds); its index is rebuilt in the child. The
# graph's is importing duckdb, numpy and its modules (seconds on a loaded machine); the child
# opens the file and loads the graph from it.
PRELOADERS: dict[str, Callable[[Settings], Callable[[], Service]]] = {
    name: _preloader(name) for name in ("lexicon", "graph")
}


def placement(config: Config) -> dict[str, tuple[str, ...]]:
    """Each supervised program and the services it runs, in start order."""
    programs: dict[str, tuple[str, ...]] = {}
    shared = shared_model.applies(config)
    for name in ALL_PROGRAMS:
        if shared and name in shared_model.SERVICES:
            programs[shared_model.PROGRAM] = shared_model.SERVICES
        else:
            programs[name] = (name,)
    return programs
