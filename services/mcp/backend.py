"""The MCP server's one road to keymem: the router's ``memory`` service, errors translated.

Every tool goes through ``MemoryBackend.ask``: one request to the router (concurrent
``remember`` calls share one: coalesce.py), the reply validated into the tool's output model,
and any failure turned into a ``ToolError`` whose text an agent can act on (the SDK returns it
as an ``is_error`` result; the server never crashes). Failures of keymem itself (unavailable,
timeout, internal) also name the logs to read.

The services start in the background (``startup.py``): a call first waits for that start-up
within its own deadline, and says the services are still starting if the deadline comes first.
When they could not be started, each call pings them briefly (ready as ``keymem up`` means
it), so a tool answers the start-up failure at once instead of waiting out a deadline — and
works again once someone starts them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any, TypeVar

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, ValidationError

from keymem.protocol.async_client import AsyncClient
from keymem.protocol.client import with_idempotency_key
from keymem.protocol.errors import ErrorCode, KeymemError
from keymem.services.config import ALL_PROGRAMS
from keymem.services.mcp.coalesce import Remembers
from keymem.services.mcp.startup import Startup, StartupFailed

log = logging.getLogger(__name__)

TOOL_TIMEOUT_MS = 20_000  # one tool call, end to end through the router
BATCH_TIMEOUT_MS = 60_000  # remember_batch: up to 200 items' keys to embed
PROBE_TIMEOUT_MS = 1_000  # does every service answer (after a failed start)
# Tools that change memories: each call carries an idempotency key, so sending it again after
# the router or the graph died commits it once and reports the commit (docs/RELIABILITY.md).
WRITES = {"remember", "remember_batch", "correct", "forget", "dismiss", "confirm_memory"}
# keymem-side failures, as opposed to a mistake in the agent's arguments.
SERVICE_FAILURES = {ErrorCode.UNAVAILABLE, ErrorCode.TIMEOUT, ErrorCode.INTERNAL}

Model = TypeVar("Model", bound=BaseModel)


class MemoryBackend:
    def __init__(
        self,
        endpoint: str,
        log_dir: Path,
        *,
        startup: Startup | None = None,
        timeout_ms: int = TOOL_TIMEOUT_MS,
    ) -> None:
        self.endpoint = endpoint
        self.log_dir = log_dir
        self.timeout_ms = timeout_ms  # a call's deadline unless the tool sets its own
        self.startup = startup  # None once it has ended (or when nothing starts the services)
        self.launch_error: str | None = None
        self._client: AsyncClient | None = None
        self._remembers: Remembers | None = None

    @property
    def client(self) -> AsyncClient:
        # Created on first use, inside the server's event loop (zmq.asyncio binds to it).
        if self._client is None:
            self._client = AsyncClient(self.endpoint, timeout_ms=self.timeout_ms)
        return self._client

    @property
    def remembers(self) -> Remembers:
        """Concurrent remembers sent together (coalesce.py), on ``client``."""
        if self._remembers is None:
            self._remembers = Remembers(self.client)
        return self._remembers

    async def call(
        self, method: str, body: dict[str, Any], *, timeout_ms: int | None = None
    ) -> Any:
        """The memory service's reply to ``method``, or a ``ToolError`` saying what failed.

        Every call may be sent again within its deadline when keymem restarts a service under
        it: reads are idempotent, and writes carry an idempotency key. Waiting for the
        start-up counts against ``timeout_ms`` (default: the backend's)."""
        timeout_ms = self.timeout_ms if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000
        await self._started(timeout_ms)
        if self.launch_error is not None:
            await self._probe()
        if method in WRITES:
            body = with_idempotency_key(body)
        left_ms = max(1, int((deadline - time.monotonic()) * 1000))
        try:
            if method == "remember":
                return await self.remembers.remember(body, deadline)
            return await self.client.call("memory", method, body, timeout_ms=left_ms, retry=True)
        except KeymemError as exc:
            raise ToolError(self._describe(method, exc)) from exc

    async def ask(
        self,
        method: str,
        body: dict[str, Any],
        model: type[Model],
        *,
        timeout_ms: int | None = None,
    ) -> Model:
        """``call`` with the reply checked against the tool's output model."""
        reply = await self.call(method, body, timeout_ms=timeout_ms)
        try:
            return model.model_validate(reply)
        except ValidationError as exc:
            log.error("memory.%s replied in an unexpected shape: %s", method, exc)
            raise ToolError(
                f"internal: keymem's {method} reply did not match its published shape; "
                f"please report it (details in this server's stderr)"
            ) from exc

    async def _started(self, timeout_ms: int) -> None:
        """Wait (within ``timeout_ms``) for the services' start-up to end."""
        startup = self.startup
        if startup is None:
            return
        try:
            await startup.wait(timeout_ms / 1000)
        except TimeoutError:
            raise ToolError(
                f"unavailable: keymem's services are still starting "
                f"({startup.elapsed_s():.0f} s so far; this call waited its "
                f"{timeout_ms / 1000:g} s deadline). Call again in a few seconds; "
                f"start-up logs in {self.log_dir}"
            ) from None
        except StartupFailed as exc:
            self.launch_error = str(exc)
        self.startup = None

    async def _probe(self) -> None:
        """Ready as ``keymem up`` means it: the router and every service answer ``ping``."""
        pings = [
            self.client.call(name, "ping", timeout_ms=PROBE_TIMEOUT_MS) for name in ALL_PROGRAMS
        ]
        outcomes = await asyncio.gather(*pings, return_exceptions=True)
        if any(isinstance(outcome, BaseException) for outcome in outcomes):
            raise ToolError(f"unavailable: keymem could not be started. {self.launch_error}")
        log.info("keymem's services answer now; the start-up failure is over")
        self.launch_error = None

    def _describe(self, method: str, exc: KeymemError) -> str:
        text = f"{exc.code.value}: {exc.message}"
        if exc.code in SERVICE_FAILURES:
            text += (
                f" (keymem's services failed on {method}; run `keymem status`, "
                f"logs in {self.log_dir})"
            )
        return text

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
            self._remembers = None
