"""The page's one road to keymem: the router's ``memory`` service as the MCP tools use it
(and one read-only graph view).

Writes carry an idempotency key and every call may be sent again within its deadline, so a
service restarted under a click commits a change once. keymem's typed errors become HTTP
statuses with the same code and message, which the page shows as they are.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from keymem.protocol.async_client import AsyncClient
from keymem.protocol.client import with_idempotency_key
from keymem.protocol.errors import ErrorCode, KeymemError

CALL_TIMEOUT_MS = 20_000  # one call through the router, as an MCP tool gets

HTTP_STATUS = {
    ErrorCode.BAD_REQUEST: 400,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.CONFLICT: 409,
    ErrorCode.TOO_LARGE: 413,
    ErrorCode.UNSUPPORTED_VERSION: 400,
    ErrorCode.INTERNAL: 500,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.TIMEOUT: 504,
}


class Gateway:
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._client: AsyncClient | None = None

    async def read(self, method: str, body: dict[str, Any], *, service: str = "memory") -> Any:
        """``service.method``: the memory service's, or a read-only graph view it does not
        expose (``list_memories``)."""
        return await self._call(service, method, body)

    async def write(self, method: str, body: dict[str, Any]) -> Any:
        """A change through the memory service, safe to send again (idempotency key)."""
        return await self._call("memory", method, with_idempotency_key(body))

    async def _call(self, service: str, method: str, body: dict[str, Any]) -> Any:
        if self._client is None:  # created inside the server's event loop (zmq.asyncio binds)
            self._client = AsyncClient(self.endpoint, timeout_ms=CALL_TIMEOUT_MS)
        return await self._client.call(service, method, body, retry=True)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


async def error_response(request: Request, exc: Exception) -> JSONResponse:
    """A keymem error as ``{error: code, message}`` with its HTTP status."""
    assert isinstance(exc, KeymemError)
    return JSONResponse(
        {"error": exc.code.value, "message": exc.message}, status_code=HTTP_STATUS[exc.code]
    )
