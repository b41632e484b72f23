"""Run one service as a process (what supervisord starts): ``python -m keymem.services <name>``."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from types import FrameType

from keymem.protocol.endpoints import make_private, prepare_run_dir
from keymem.protocol.worker import Worker
from keymem.services.catalog import BUILDERS
from keymem.services.config import (
    ALL_PROGRAMS,
    EXIT_SERVICE_CONFIG,
    LOG_LEVEL,
    ConfigError,
    Settings,
)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in ALL_PROGRAMS:
        print(f"usage: python -m keymem.services {{{','.join(ALL_PROGRAMS)}}}", file=sys.stderr)
        return 2
    name = args[0]
    make_private()
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"keymem {name}: configuration error: {exc}", file=sys.stderr)
        return EXIT_SERVICE_CONFIG
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
    try:
        if name == "router":
            # Only the router loads the memory service: a worker's restart skips it.
            from keymem.services.router.process import run_router

            run_router(settings, stop)
        else:
            Worker(
                BUILDERS[name](settings),
                settings.endpoints.backend,
                direct_endpoint=settings.endpoints.direct(name, os.getpid()),
                heartbeat=settings.heartbeat,
                stop=stop,
            ).run()
    except ConfigError as exc:  # a service's own check, made as it is built
        print(f"keymem {name}: configuration error: {exc}", file=sys.stderr)
        return EXIT_SERVICE_CONFIG
    return 0
