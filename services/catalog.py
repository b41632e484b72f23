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


# How long supervisord lets a program stop before it SIGKILLs it (its ``stopwaitsecs``). A stop
# finishes what a kill would leave half-written, each part within a bound of its own: the
# graph lets a backup it has begun finish (abandoning it past GRAPH_BACKUP_WAIT_AT_STOP_S, its
# partial file removed: a backup is minutes at 1M on a loaded box), then folds its
# write-behind log into the file and checkpoints (under a second at 100k); the lexicon may save
# its term cache (a 1M first index: 2 s idle, 10 s at load 22). CLOSE_BUDGET_S covers either
# close several times over; the other programs only close sockets.
GRAPH_BACKUP_WAIT_AT_STOP_S = 120.0
CLOSE_BUDGET_S = 30.0
DEFAULT_STOP_WAIT_S = 10.0
STOP_WAIT_S = {"graph": GRAPH_BACKUP_WAIT_AT_STOP_S + CLOSE_BUDGET_S, "lexicon": CLOSE_BUDGET_S}


def stop_wait_s(program: str) -> float:
    return STOP_WAIT_S.get(program, DEFAULT_STOP_WAIT_S)


# What every program's environment holds besides the settings. numpy asks the kernel for
# transparent huge pages for each large array; on the virtual machines measured here a huge
# page's first touch costs so much kernel time that the graph's start at 1M memories took 28-31
# s with them and 11-12 s without, and the lexicon's updates 1,785-1,844/s against
# 2,869-3,048/s (benchmarks.lexicon_scale); searches and queries as fast either way. When every
# fault is dear on the host, both settings pay alike (NUMPY_MADVISE_HUGEPAGE, numpy's own
# switch; docs/history/graph-start-2026-12-03f.md, docs/history/huge-pages-2026-12-03h.md).
PROGRAM_ENVIRONMENT = {"NUMPY_MADVISE_HUGEPAGE": "0"}
