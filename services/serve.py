"""Run one supervised program (what supervisord starts): ``python -m keymem.services <name>``.

A program is a service, or ``models``: the embedder and the reranker sharing one model
(services/shared_model.py), each served by its own worker thread.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

from keymem.protocol.endpoints import make_private, prepare_run_dir
from keymem.protocol.worker import Service, Worker
from keymem.services import prefork, shared_model
from keymem.services.catalog import BUILDERS, PRELOADERS
from keymem.services.config import (
    ALL_PROGRAMS,
    EXIT_SERVICE_CONFIG,
    LOG_LEVEL,
    ConfigError,
    Settings,
)

PROGRAMS = (*ALL_PROGRAMS, shared_model.PROGRAM)
JOIN_TIMEOUT_S = 5.0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in PROGRAMS:
        print(f"usage: python -m keymem.services {{{','.join(PROGRAMS)}}}", file=sys.stderr)
        return 2
    name = args[0]
    make_private()
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"keymem {name}: configuration error: {exc}", file=sys.stderr)
        return EXIT_SERVICE_CONFIG
    return serve(name, settings)


def serve(name: str, settings: Settings) -> int:
    """Run program ``name`` until SIGTERM or SIGINT (``keymem worker`` runs one this way)."""
    logging.basicConfig(
        level=settings.config[LOG_LEVEL],
        format=f"%(asctime)s {name}[%(process)d] %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    prepare_run_dir(settings.endpoints)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logging.getLogger("keymem").info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return _configured(name, lambda: _run(name, settings, stop))


def _configured(name: str, start: Callable[[], int]) -> int:
    """``start``'s exit code, or 78 with one line for a service's own configuration check."""
    try:
        return start()
    except ConfigError as exc:  # a service's own check, made as it is built
        print(f"keymem {name}: configuration error: {exc}", file=sys.stderr)
        return EXIT_SERVICE_CONFIG


def _run(name: str, settings: Settings, stop: threading.Event) -> int:
    if name == "router":
        # Only the router loads the memory service: a worker's restart skips it.
        from keymem.services.router.process import run_router

        run_router(settings, stop)
        return 0
    if name in PRELOADERS:
        build = PRELOADERS[name](settings)  # loaded once for every forked worker
        return prefork.run(
            lambda child_stop: _configured(
                name, lambda: _serve_workers(settings, [build()], child_stop)
            ),
            stop,
        )
    if name == shared_model.PROGRAM:
        return _serve_workers(settings, shared_model.build(settings), stop)
    return _serve_workers(settings, [BUILDERS[name](settings)], stop)


def _serve_workers(settings: Settings, services: list[Service], stop: threading.Event) -> int:
    """A worker per service: the first in this thread, any others in threads of their own."""
    first, *others = [
        Worker(
            service,
            settings.endpoints.backend,
            direct_endpoint=settings.endpoints.direct(service.name, os.getpid()),
            heartbeat=settings.heartbeat,
            stop=stop,
        )
        for service in services
    ]
    threads = [
        threading.Thread(target=worker.run, name=worker.service.name, daemon=True)
        for worker in others
    ]
    for thread in threads:
        thread.start()
    first.run()
    for thread in threads:
        thread.join(JOIN_TIMEOUT_S)
    return 0
