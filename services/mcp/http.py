"""The same MCP server over streamable HTTP (``keymem mcp --http``), for remote or many clients.

The SDK's streamable-HTTP app (Starlette, served by uvicorn) carries the protocol; in front of
it every HTTP request must bear ``Authorization: Bearer <token>``, the token kept in
KEYMEM_HOME/mcp-token (0600, created on first use), or it is answered 401 and reaches nothing.
It binds 127.0.0.1 unless told otherwise; another address needs ``allow_remote``, because
whoever reaches the port and holds the token reads and rewrites every memory, over plain HTTP
that anyone on the path can read (put TLS in front of it). On loopback the SDK's DNS-rebinding
guard also checks the Host and Origin headers.
"""

from __future__ import annotations

import hmac
import ipaddress
from pathlib import Path

from mcp.server import MCPServer
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from keymem.services.token_file import read_or_create_token

TOKEN_FILE = "mcp-token"
LOOPBACK_NAMES = ("localhost",)
MCP_PATH = "/mcp"


class RemoteRefused(ValueError):
    """A non-loopback address without the explicit ``allow_remote``."""


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, *, allow_remote: bool) -> None:
    """Refuse to serve beyond this machine unless the operator said so."""
    if not is_loopback(host) and not allow_remote:
        raise RemoteRefused(
            f"{host} is not a loopback address: anyone who reaches it with the token reads and "
            "rewrites every memory, over unencrypted HTTP. Pass --allow-remote to bind it anyway."
        )


def token_path(home: Path) -> Path:
    return home / TOKEN_FILE


def bearer_token(home: Path) -> str:
    """The token in KEYMEM_HOME/mcp-token, created (0600, random) when there is none."""
    return read_or_create_token(token_path(home))


class BearerAuth:
    """ASGI middleware: an HTTP request without ``Bearer <token>`` is answered 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                refusal = PlainTextResponse(
                    "keymem: a bearer token is required (Authorization: Bearer <the token in "
                    "KEYMEM_HOME/mcp-token>)",
                    status_code=401,
                    headers={"WWW-Authenticate": 'Bearer realm="keymem"'},
                )
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def serve_http(server: MCPServer[None], *, host: str, port: int, token: str) -> None:
    """``server`` over streamable HTTP at http://host:port/mcp until interrupted."""
    import uvicorn

    app = BearerAuth(server.streamable_http_app(streamable_http_path=MCP_PATH, host=host), token)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
