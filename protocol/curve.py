"""CURVE on tcp sockets: the keys a process presents when it connects, and the server side.

Every tcp connection between keymem processes is encrypted and authenticated with ZeroMQ's
CURVE (RFC 26): the router holds the server key pair, every client and worker a client key pair
the router knows (docs/SCALING.md). A process learns its keys once, when it reads its settings
(``services/config.py`` registers them for the router's two endpoints); ``Client``,
``AsyncClient`` and ``Worker`` connect through ``connect`` here, so no call site carries keys.
ipc and inproc sockets never use CURVE: the 0700 run directory and the process boundary guard
them. Only the standard library is imported at start, pyzmq when a socket is configured: the
hook loads this module through its settings and talks to a local router without pyzmq
(protocol/zmtp.py); its records are ``NamedTuple``s (see protocol/envelope.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import zmq

# The ZAP domains of the router's two sockets: the handler admits clients on one, workers on
# the other (services/router/auth.py).
FRONTEND_DOMAIN = "frontend"
BACKEND_DOMAIN = "backend"


class KeyPair(NamedTuple):
    public: bytes  # z85, 40 bytes
    secret: bytes  # z85


class ClientKeys(NamedTuple):
    """What a client or worker presents: the router's public key and its own key pair."""

    server_public: bytes
    own: KeyPair


_presented: dict[str, ClientKeys] = {}


def present(endpoint: str, keys: ClientKeys) -> None:
    """Authenticate with ``keys`` whenever this process connects to ``endpoint``."""
    _presented[endpoint] = keys


def connect(sock: zmq.Socket[Any], endpoint: str, keys: ClientKeys | None = None) -> None:
    """``sock.connect(endpoint)``, as a CURVE client with ``keys``, else with the keys
    registered for ``endpoint`` (if any)."""
    import zmq

    keys = keys or _presented.get(endpoint)
    if keys is not None:
        sock.setsockopt(zmq.CURVE_SERVERKEY, keys.server_public)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.own.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, keys.own.secret)
    sock.connect(endpoint)


def serve(sock: zmq.Socket[Any], server: KeyPair, domain: str) -> None:
    """Make ``sock`` a CURVE server whose peers the ZAP handler of ``domain`` admits.

    Set before ``bind``; inproc peers of the same socket skip the handshake (libzmq runs no
    security mechanism in-process), so the router's own threads still reach it.
    """
    import zmq

    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, server.public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, server.secret)
    sock.setsockopt(zmq.ZAP_DOMAIN, domain.encode())
