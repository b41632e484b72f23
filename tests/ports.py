"""Free loopback TCP ports for tests that bind real sockets."""

from __future__ import annotations

import socket

PAIR_ATTEMPTS = 50


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def free_port_pair() -> int:
    """A port P with P and P + 1 free (the router's frontend and backend)."""
    for _ in range(PAIR_ATTEMPTS):
        port = free_port()
        with socket.socket() as second:
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two consecutive free ports")
