"""Who may use the page: whoever holds the token in KEYMEM_HOME (a 0600 file).

The page binds loopback only, but every local user and every web page the browser opens can
reach loopback. The token keeps them out: ``keymem ui`` prints a URL carrying it, the first
request trades it for a ``SameSite=Strict``, ``HttpOnly`` cookie (so another site can neither
read it nor make the browser send it), and every request without the cookie (or an
``Authorization: Bearer`` header, for scripts) gets 401.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from pathlib import Path

from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

TOKEN_FILE = "ui.token"
TOKEN_BYTES = 32
TOKEN_FILE_MODE = 0o600
COOKIE = "keymem_ui_token"
QUERY_PARAMETER = "token"
REFUSED = (
    "keymem ui: this page needs its token. Open the URL `keymem ui` printed "
    "(http://127.0.0.1:PORT/?token=...).\n"
)


def token_path(home: Path) -> Path:
    return home / TOKEN_FILE


def load_or_create_token(home: Path) -> str:
    """The page's token, created on first use. A token file other users could read is
    replaced: its token may have been read."""
    path = token_path(home)
    try:
        mode = path.stat().st_mode
        token = path.read_text().strip()
        if not mode & (stat.S_IRWXG | stat.S_IRWXO) and len(token) >= TOKEN_BYTES:
            return token
    except FileNotFoundError:
        pass
    token = secrets.token_urlsafe(TOKEN_BYTES)
    staged = path.with_name(f".{TOKEN_FILE}.{os.getpid()}")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, TOKEN_FILE_MODE)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    os.chmod(staged, TOKEN_FILE_MODE)
    os.replace(staged, path)
    return token


class TokenGate:
    """ASGI middleware: the token (query once, then cookie or bearer header) or 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    def _is_token(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        response: Response | None = None
        if self._is_token(request.query_params.get(QUERY_PARAMETER)):
            # Trade the token in the address bar (and history) for the cookie.
            response = RedirectResponse(
                str(URL(scope=scope).remove_query_params(QUERY_PARAMETER)), status_code=303
            )
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict")
        elif not (
            self._is_token(request.cookies.get(COOKIE))
            or self._is_token(bearer(request.headers.get("authorization")))
        ):
            response = PlainTextResponse(REFUSED, status_code=401)
        if response is None:
            await self.app(scope, receive, send)
        else:
            await response(scope, receive, send)


def bearer(header: str | None) -> str | None:
    if header is None:
        return None
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None
