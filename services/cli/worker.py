"""``keymem worker SERVICE --connect tcp://HOST:PORT``: one more model worker for a router on
another host (docs/SCALING.md).

The worker registers on the router's backend (PORT + 1) under this host's client key (CURVE,
KEYMEM_CLIENT_KEY; it must be a key that may use every namespace) and serves until
interrupted; the router spreads requests over it and its own workers. The graph stays with
the router: it is the single writer of the DuckDB file.
"""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import urlsplit

from keymem.services import serve
from keymem.services.config import (
    TCP_HOST,
    TCP_PORT,
    TRANSPORT,
    ConfigError,
    Setting,
    Settings,
    load,
)

REMOTE_SERVICES = ("embedder", "reranker", "lexicon")


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "worker", help="serve one more embedder, reranker or lexicon for a router over tcp"
    )
    parser.add_argument("service", choices=REMOTE_SERVICES)
    parser.add_argument(
        "--connect",
        required=True,
        metavar="tcp://HOST:PORT",
        help="the router's address, as clients use it (KEYMEM_TCP_PORT, 47810 by default)",
    )
    parser.set_defaults(run=run)


def router_address(url: str) -> tuple[str, int]:
    """HOST and PORT of ``tcp://HOST:PORT``; a ``ConfigError`` naming the flag otherwise."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "tcp" or not parts.hostname or port is None:
        raise ConfigError(f"--connect must look like tcp://HOST:PORT, got {url!r}")
    return parts.hostname, port


def run(args: argparse.Namespace) -> int:
    host, port = router_address(args.connect)
    changes: dict[Setting[Any], Any] = {
        TRANSPORT: "tcp",
        TCP_HOST: host,
        TCP_PORT: TCP_PORT.parse(str(port)),
    }
    settings = Settings.from_config(load().replaced("keymem worker --connect", changes))
    return serve.serve(args.service, settings)
