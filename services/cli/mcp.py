"""``keymem mcp``: the stdio MCP server an agent host spawns (``--http``: over streamable HTTP).

stdout belongs to the protocol, so everything else (start-up notes, logs, a model migration's
progress) goes to stderr; while serving, the SDK points file descriptor 1 at stderr too, so a
stray print or a child process cannot corrupt the stream. The server answers ``initialize``
and ``tools/list`` at once: the background services are started (or found running; one
supervisord however many agents start at once) in a thread, and a tool call waits for them
within its deadline. If they cannot be started, the server still runs and every tool answers
the start-up failure, naming the log to read. ``--http`` serves the same server over
streamable HTTP instead (``services/mcp/http.py``: loopback unless ``--allow-remote``, a bearer
token from KEYMEM_HOME on every request).
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from functools import partial
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError
from keymem.services.config import HOOK_INSTALLED, Settings
from keymem.services.launcher import ensure_up
from keymem.services.scope import scope_of
from keymem.services.supervision import Supervision, SupervisionError

# The store's size for the instructions, asked only when the services already run.
COUNTS_TIMEOUT_MS = 1_000
HTTP_HOST_DEFAULT = "127.0.0.1"
HTTP_PORT_DEFAULT = 8791
LOG_FORMAT = "%(asctime)s keymem-mcp %(levelname)s %(name)s: %(message)s"


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "mcp", help="run the MCP server: stdio for agent hosts, or --http"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        help="seconds to wait for the services to become ready (default: KEYMEM_UP_TIMEOUT_S)",
    )
    parser.add_argument(
        "--http",
        action="store_true",
        help="serve MCP over streamable HTTP at http://HOST:PORT/mcp instead of stdio; every "
        "request needs the bearer token in KEYMEM_HOME/mcp-token (created on first use)",
    )
    parser.add_argument("--host", default=HTTP_HOST_DEFAULT, help="with --http: the address")
    parser.add_argument(
        "--port", type=int, default=HTTP_PORT_DEFAULT, help="with --http: the TCP port"
    )
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="with --http: allow a non-loopback --host (anyone reaching it with the token "
        "reads and rewrites every memory, unencrypted; see docs/TOOLS.md)",
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
    if args.http:
        from keymem.services.mcp.http import RemoteRefused, check_bind

        try:
            check_bind(args.host, allow_remote=args.allow_remote)
        except RemoteRefused as exc:
            say(f"keymem mcp: {exc}")
            return 2
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
    if not args.http:
        anyio.run(serve, server)
        return 0
    from keymem.services.mcp.http import MCP_PATH, bearer_token, serve_http, token_path

    token = bearer_token(settings.home)
    say(
        f"keymem mcp: serving MCP at http://{args.host}:{args.port}{MCP_PATH} "
        f"(bearer token in {token_path(settings.home)})"
    )
    anyio.run(partial(serve_http, server, host=args.host, port=args.port, token=token))
    return 0
