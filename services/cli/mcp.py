"""``keymem mcp``: the stdio MCP server an agent host spawns.

stdout belongs to the protocol, so everything else (start-up notes, logs, a model migration's
progress) goes to stderr — during start-up stdout is even redirected there, so a stray print
cannot corrupt the stream. The background services are started if they are not running (one
supervisord however many agents start at once); if they cannot be, the server still runs and
every tool answers the start-up failure, naming the log to read.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import subprocess
import sys
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError
from keymem.services.config import HOOK_INSTALLED, Settings
from keymem.services.launcher import ensure_up
from keymem.services.supervision import SupervisionError

COUNTS_TIMEOUT_MS = 5_000
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


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format=LOG_FORMAT)
    # Imported here: the SDK is heavy and only this command needs it.
    import anyio

    from keymem.services.mcp.backend import MemoryBackend
    from keymem.services.mcp.provenance import Provenance
    from keymem.services.mcp.server import build_server
    from keymem.services.mcp.stdio import serve

    settings = Settings.from_env()
    launch_error: str | None = None
    counts: dict[str, Any] | None = None
    with contextlib.redirect_stdout(sys.stderr):
        try:
            launch = ensure_up(settings, timeout_s=args.timeout, announce=say)
            if launch.differences:
                say(f"keymem mcp: {launch.describe_differences()}")
            with Client(settings.endpoints.frontend, timeout_ms=COUNTS_TIMEOUT_MS) as client:
                counts = client.call("memory", "counts", {})
        except (SupervisionError, KeymemError, OSError, subprocess.SubprocessError) as exc:
            launch_error = f"{exc} (logs in {settings.log_dir})"
            say(f"keymem mcp: the services are not available; every tool will say so.\n{exc}")
    backend = MemoryBackend(
        settings.endpoints.frontend, settings.log_dir, launch_error=launch_error
    )
    server = build_server(
        backend,
        counts=counts,
        provenance=Provenance.from_config(settings.config),
        hook=settings.config[HOOK_INSTALLED],
    )
    anyio.run(serve, server)
    return 0
