"""Tool calls served by the SDK's request kernel straight from the stdio loop.

The SDK's stdio server carries every request through memory streams, an era relay and a
dispatcher task before its request kernel (``ServerRunner.on_request``: the request surface,
the middleware, the tool with its argument and output models, the version's result surface)
runs: in the ``keymem mcp`` process that transport costs more CPU per ``remember`` than the
tool itself, on the path of every call. ``DirectCalls`` takes a ``tools/call`` of one of the
server's tools off the stdin loop and runs that same kernel for it in a task of its own, on
the connection the SDK's loop would use: a 2026-era request through the SDK's single-exchange
entry (``serve_one``) on a connection made from its own envelope, as the SDK's modern loop
does; a handshake-era one on one connection made from the handshake the SDK accepted (the
negotiated version, the client's info and capabilities, seen by ``middleware``), as the SDK's
legacy loop keeps one. The reply, and any notification the call sends, is written straight to
the pipe when stdout is one (each message one whole line, as the SDK's writer writes it): the
SDK's write stream is a rendezvous with its writer task, two task switches a message on the
path of every call; otherwise it goes through that stream.

Everything else stays with the SDK's loop: the handshake, listings, prompts, pings, a
notification, a call before the handshake completed, an envelope the SDK would refuse, a
task-augmented call. A ``notifications/cancelled`` for a call taken here cancels its task,
and, as in the SDK, nothing is answered. The back-channel carries notifications only (no
server-to-client requests: keymem's tools make none).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server import MCPServer
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.runner import ServerRunner, modern_error_data, serve_one
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.inbound import InboundModernRoute, classify_inbound_request
from mcp.shared.message import MessageMetadata, SessionMessage
from mcp.shared.transport_context import TransportContext
from mcp_types import (
    PROTOCOL_VERSION_META_KEY,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCResponse,
    RequestId,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

TOOLS_CALL = "tools/call"
CANCELLED = "notifications/cancelled"
STDIO = TransportContext(kind="stdio", can_send_request=False)


class Wire(Protocol):
    """The pipe the SDK's stdio writer writes to (``stdio.PipeWriter``)."""

    async def write(self, text: str) -> None: ...

    async def flush(self) -> None: ...


Message = JSONRPCResponse | JSONRPCError | JSONRPCNotification
Send = Callable[[Message], Awaitable[None]]


class DirectCalls:
    """The stdio loop's share of ``server``'s tool calls (see the module doc)."""

    def __init__(self, server: MCPServer[None]) -> None:
        self.server = server
        self.answers: MemoryObjectSendStream[SessionMessage] | None = None
        self.wire: Wire | None = None  # stdout, when it is a pipe
        self._offered: Mapping[str, Any] | None = None  # an accepted initialize's params
        self._handshake: ServerRunner[None] | None = None  # the kernel on the handshake's terms
        self._running: dict[RequestId, asyncio.Task[None]] = {}

    async def middleware(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Watches the handshake go through the SDK: once an ``initialize`` has passed,
        ``notifications/initialized`` carries the version the connection settled on."""
        result = await call_next(ctx)
        if ctx.method == "initialize":
            self._offered = ctx.params or {}
        elif (
            ctx.method == "notifications/initialized"
            and self._offered is not None
            and self.answers is not None
            and ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
        ):
            connection = Connection.from_envelope(
                ctx.protocol_version,
                self._offered.get("clientInfo"),
                self._offered.get("capabilities"),
                outbound=Notifications(self.send),
            )
            self._handshake = ServerRunner(self.server._lowlevel_server, connection, None)
        return result

    def take(self, message: Any) -> bool:
        """Whether this loop answers ``message`` (a parsed JSON-RPC line): a tool call it
        starts, or the cancellation of one it runs. False leaves the line to the SDK."""
        if self.answers is None or not isinstance(message, dict):
            return False
        params = message.get("params")
        if message.get("method") == CANCELLED and isinstance(params, dict):
            task = self._running.get(params.get("requestId"))  # type: ignore[arg-type]
            if task is None:
                return False
            task.cancel()
            return True
        request_id = message.get("id")
        if (
            message.get("method") != TOOLS_CALL
            or message.get("jsonrpc") != "2.0"
            or not isinstance(params, dict)
            or not isinstance(request_id, str | int)
            or isinstance(request_id, bool)
            or request_id in self._running
            or params.get("task") is not None
            or self.server._tool_manager.get_tool(params.get("name")) is None  # type: ignore[arg-type]
        ):
            return False
        served = self._served(message, params, CallContext(request_id, Notifications(self.send)))
        if served is None:
            return False
        task = asyncio.get_running_loop().create_task(_answer(self.send, request_id, served))
        self._running[request_id] = task
        task.add_done_callback(lambda _: self._running.pop(request_id, None))
        return True

    async def send(self, message: Message) -> None:
        """``message`` to the client: one line straight onto the pipe, or through the SDK's
        write stream when stdout is not one."""
        if self.wire is not None:
            await self.wire.write(message.model_dump_json(by_alias=True, exclude_unset=True) + "\n")
            await self.wire.flush()
            return
        assert self.answers is not None
        await self.answers.send(SessionMessage(message))

    def _served(
        self, message: dict[str, Any], params: dict[str, Any], context: CallContext
    ) -> Callable[[], Awaitable[dict[str, Any]]] | None:
        """How the kernel answers this call as the SDK's loop would serve it, or None to leave
        it to that loop: a 2026 request on a connection made from its own envelope and closed
        after it (``serve_one``), a handshake-era one on the handshake's connection."""
        meta = params.get("_meta")
        if isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta:
            route = classify_inbound_request(message)
            if not isinstance(route, InboundModernRoute):
                return None
            connection = Connection.from_envelope(
                route.protocol_version,
                route.client_info,
                route.client_capabilities,
                outbound=context.channel,
            )
            lowlevel = self.server._lowlevel_server
            return partial(
                serve_one,
                lowlevel,
                context,
                TOOLS_CALL,
                params,
                connection=connection,
                lifespan_state=None,
            )
        if self._handshake is None:
            return None
        return partial(self._handshake.on_request, context, TOOLS_CALL, params)


async def _answer(
    send: Send,
    request_id: RequestId,
    served: Callable[[], Awaitable[dict[str, Any]]],
) -> None:
    """Await the kernel's answer to one tool call and write its reply (or its error)."""
    try:
        reply: JSONRPCResponse | JSONRPCError = JSONRPCResponse(
            jsonrpc="2.0", id=request_id, result=await served()
        )
    except asyncio.CancelledError:
        return  # the client cancelled it: never answered
    except Exception as exc:
        reply = JSONRPCError(jsonrpc="2.0", id=request_id, error=modern_error_data(exc))
    await send(reply)


@dataclass(frozen=True)
class Notifications:
    """A back-channel to the client that sends notifications and refuses requests."""

    send: Send

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        notification = JSONRPCNotification(
            jsonrpc="2.0", method=method, params=dict(params) if params is not None else None
        )
        await self.send(notification)


@dataclass
class CallContext:
    """The SDK's ``DispatchContext`` for one call taken off the stdio loop."""

    request_id: RequestId
    channel: Notifications
    transport: TransportContext = STDIO
    message_metadata: MessageMetadata = None
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)

    @property
    def can_send_request(self) -> bool:
        return False

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        return await self.channel.send_raw_request(method, params, opts)

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        await self.channel.notify(method, params, opts)

    async def progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Progress needs the request's progress token wiring; keymem's tools report none."""
