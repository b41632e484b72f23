"""Run one service as a process (what supervisord starts): ``python -m keymem.services <name>``."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from types import FrameType

from keymem.protocol.endpoints import prepare_run_dir
from keymem.protocol.worker import Worker
from keymem.services.catalog import BUILDERS
from keymem.services.config import ALL_PROGRAMS, ConfigError, Settings
from keymem.services.router.process import run_router

EXIT_CONFIG_ERROR = 78  # sysexits.h EX_CONFIG


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in ALL_PROGRAMS:
        print(f"usage: python -m keymem.services {{{','.join(ALL_PROGRAMS)}}}", file=sys.stderr)
        return 2
    name = args[0]
    try:
        logging.basicConfig(
            level=os.environ.get("KEYMEM_LOG_LEVEL", "INFO").upper(),
            format=f"%(asctime)s {name}[%(process)d] %(levelname)s %(message)s",
            stream=sys.stderr,
        )
        settings = Settings.from_env()
    except ValueError as exc:  # ConfigError, or logging's own for an unknown level
        print(f"keymem {name}: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    prepare_run_dir(settings.endpoints)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logging.getLogger("keymem").info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        if name == "router":
            run_router(settings, stop)
        else:
            Worker(
                BUILDERS[name](settings),
                settings.endpoints.backend,
                direct_endpoint=settings.endpoints.direct(name, os.getpid()),
                heartbeat=settings.heartbeat,
                stop=stop,
            ).run()
    except ConfigError as exc:  # a service's own setting, read as it is built
        print(f"keymem {name}: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    return 0
