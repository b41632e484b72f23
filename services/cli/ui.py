"""``keymem ui``: serve the memory browser on loopback and print the URL that opens it.

The services are started first if they are not running (as ``keymem mcp`` does). The page is
bound to 127.0.0.1 only; the URL carries the token from KEYMEM_HOME/ui.token, which the first
request trades for a cookie (services/ui/access.py). It runs until Ctrl-C.
"""

from __future__ import annotations

import argparse
import socket
import sys
import webbrowser
from typing import Any

from keymem.services.config import Settings
from keymem.services.launcher import ensure_up
from keymem.services.supervision import SupervisionError

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 8377
MAX_PORT = 65_535


def port_number(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"a port is an integer in [0, {MAX_PORT}], not {text!r}")
    return port


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ui", help="browse and walk the memory graph in a local web page"
    )
    parser.add_argument(
        "--port",
        type=port_number,
        default=DEFAULT_PORT,
        help=f"port on {LOOPBACK} (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    parser.add_argument("--open", action="store_true", help="open the page in the web browser")
    parser.add_argument(
        "--timeout",
        type=float,
        help="seconds to wait for the services to become ready (default: KEYMEM_UP_TIMEOUT_S)",
    )
    parser.set_defaults(run=run)


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    # Imported here: the ASGI stack is heavy and only this command needs it.
    import uvicorn

    from keymem.services.ui.access import load_or_create_token
    from keymem.services.ui.app import build_app
    from keymem.services.ui.gateway import Gateway

    settings = Settings.from_env()
    # The port first: a busy one is reported before any service is started.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind((LOOPBACK, args.port))
    except OSError as exc:
        listener.close()
        say(f"keymem ui: cannot listen on {LOOPBACK}:{args.port} ({exc.strerror}); try --port 0")
        return 1
    try:
        launch = ensure_up(settings, timeout_s=args.timeout, announce=say)
    except SupervisionError as exc:
        listener.close()
        say(f"keymem ui: {exc}")
        return 1
    if launch.differences:
        say(f"keymem ui: {launch.describe_differences()}")
    token = load_or_create_token(settings.home)
    url = f"http://{LOOPBACK}:{listener.getsockname()[1]}/?token={token}"
    print(f"keymem ui: {url}\n(Ctrl-C stops it; home {settings.home})", flush=True)
    if args.open:
        webbrowser.open(url)
    app = build_app(Gateway(settings.endpoints.frontend), token)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    server.run(sockets=[listener])
    return 0
