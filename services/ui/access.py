"""Who may use the page: whoever holds the token in KEYMEM_HOME (a 0600 file).

The page binds loopback only, but every local user and every web page the browser opens can
reach loopback. The token keeps them out: ``keymem ui`` prints a URL carrying it, the first
request trades it for a ``SameSite=Strict``, ``HttpOnly`` cookie (so another site can neither
read it nor make the browser send it), and every request without the cookie (or an
``Authorization: Bearer`` header, for scripts) gets 401.
"""

from __future__ import annotations

import hmac
from pathlib import Path

from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from keymem.services.token_file import read_or_create_token

TOKEN_FILE = "ui.token"
COOKIE = "keymem_ui_token"
QUERY_PARAMETER = "token"
REFUSED = (
    "keymem ui: this page needs its token. Open the URL `keymem ui` printed "
    "(http://127.0.0.1:PORT/?token=...).\n"
)


def load_or_create_token(home: Path) -> str:
    return read_or_create_token(home / TOKEN_FILE)


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
