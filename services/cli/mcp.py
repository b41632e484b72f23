"""``keymem mcp``: the stdio MCP server an agent host spawns.

stdout belongs to the protocol, so everything else (start-up notes, logs, a model migration's
progress) goes to stderr; while serving, the SDK points file descriptor 1 at stderr too, so a
stray print or a child process cannot corrupt the stream. The server answers ``initialize``
and ``tools/list`` at once: the background services are started (or found running; one
supervisord however many agents start at once) in a thread, and a tool call waits for them
within its deadline. If they cannot be started, the server still runs and every tool answers
the start-up failure, naming the log to read.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError
from keymem.services.config import HOOK_INSTALLED, Settings
from keymem.services.launcher import ensure_up
from keymem.services.scope import scope_of
from keymem.services.supervision import Supervision, SupervisionError

# The store's size for the instructions, asked only when the services already run.
COUNTS_TIMEOUT_MS = 1_000
LOG_FORMAT = "%(asctime)s keymem-mcp %(levelname)s %(name)s: %(message)s"


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("mcp", help="run the MCP server on stdio (for agent hosts)")
    parser.add_argument(
        "--timeout",
        type=float,
        help="seconds to wait for the services to become ready (default: KEYMEM_UP_TIMEOUT_S)",
    )
    parser.set_defaults(run=run)


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def running_counts(settings: Settings) -> dict[str, Any] | None:
    """memory.counts when the services already run (a warm start), else None at once."""
    if Supervision(settings).supervisord_pid() is None:
        return None
    try:
        with Client(settings.endpoints.frontend, timeout_ms=COUNTS_TIMEOUT_MS) as client:
            counts: dict[str, Any] = client.call("memory", "counts", {})
            return counts
    except (KeymemError, OSError):
        return None


def launch(settings: Settings, timeout_s: float | None) -> None:
    """Start the services unless running and wait until ready; ``StartupFailed`` says why not."""
    from keymem.services.mcp.startup import StartupFailed

    try:
        started = ensure_up(settings, timeout_s=timeout_s, announce=say)
    except (SupervisionError, KeymemError, OSError, subprocess.SubprocessError) as exc:
        say(f"keymem mcp: the services are not available; every tool will say so.\n{exc}")
        raise StartupFailed(f"{exc} (logs in {settings.log_dir})") from exc
    if started.differences:
        say(f"keymem mcp: {started.describe_differences()}")


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format=LOG_FORMAT)
    # Imported here: the SDK is heavy and only this command needs it.
    import anyio

    from keymem.services.mcp.backend import MemoryBackend
    from keymem.services.mcp.provenance import Provenance
    from keymem.services.mcp.server import build_server
    from keymem.services.mcp.startup import Startup
    from keymem.services.mcp.stdio import serve

    settings = Settings.from_env()
    # Asked before the start-up begins: a router that is still starting would hold it up.
    counts = running_counts(settings)
    startup = Startup(lambda: launch(settings, args.timeout))
    backend = MemoryBackend(settings.endpoints.frontend, settings.log_dir, startup=startup)
    server = build_server(
        backend,
        counts=counts,
        provenance=Provenance.from_config(settings.config),
        hook=settings.config[HOOK_INSTALLED],
        project=scope_of(os.getcwd(), settings.home).project,
    )
    anyio.run(serve, server)
    return 0
