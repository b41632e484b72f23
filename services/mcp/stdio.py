"""The MCP server's stdio loop, with a guard in front of the SDK's message parser.

The SDK parses each stdin line with pydantic, which stops at 200 levels of nesting; a line it
cannot parse is dropped without an answer, so an agent that sent a deeply nested argument (or a
huge line) waited out its own timeout. The guard reads each line first: one that is larger than
``LINE_MAX_BYTES`` or nested deeper than ``MESSAGE_MAX_DEPTH`` is answered at once with a
JSON-RPC error carrying the request's id (invalid params), and never reaches the SDK. Every
other line passes through unchanged; the tools' own schemas and keymem's services check the
rest (a ``source`` is held to ``fields.FREE_FORM_MAX_DEPTH``).
"""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any, cast

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_PARAMS, INVALID_REQUEST, ErrorData, JSONRPCError

from keymem.protocol.fields import FREE_FORM_MAX_DEPTH, depth_of

# A remember_batch of 200 memories of 20,000 characters, with keys, fits with room to spare.
LINE_MAX_BYTES = 16 * 1024 * 1024
# The envelope (params, arguments, items, an item) plus a source at its own limit.
MESSAGE_MAX_DEPTH = FREE_FORM_MAX_DEPTH + 8
# An id found without parsing the line (one too deep or too large to parse).
_ID = re.compile(r'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")')


def _id_of(line: str, message: Any) -> str | int | None:
    if isinstance(message, dict):
        found = message.get("id")
        return found if isinstance(found, str | int) and not isinstance(found, bool) else None
    match = _ID.search(line[:65_536])
    if match is None:
        return None
    value = json.loads(match.group(1))
    return value if isinstance(value, str | int) else None


def refusal_of(line: str) -> JSONRPCError | None:
    """The error that answers ``line`` at once, or None to let the SDK handle it."""
    size = len(line.encode("utf-8", "replace"))
    if size > LINE_MAX_BYTES:
        return _error(
            _id_of(line, None),
            INVALID_REQUEST,
            f"message of {size} bytes; keymem takes at most {LINE_MAX_BYTES}",
        )
    try:
        message = json.loads(line)
    except RecursionError:
        message = None
    except ValueError:
        return None  # not JSON: the SDK reports that itself
    depth = MESSAGE_MAX_DEPTH + 1 if message is None else depth_of(message, MESSAGE_MAX_DEPTH)
    if depth <= MESSAGE_MAX_DEPTH:
        return None
    return _error(
        _id_of(line, message),
        INVALID_PARAMS,
        f"the message is nested more than {MESSAGE_MAX_DEPTH} levels deep; keymem takes a "
        f"source nested at most {FREE_FORM_MAX_DEPTH} levels",
    )


def _error(request_id: str | int | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))


class GuardedLines:
    """stdin's lines minus the ones ``refusal_of`` answers (through ``answers``)."""

    def __init__(self, lines: AsyncIterable[str]) -> None:
        self.lines = lines
        self.answers: MemoryObjectSendStream[SessionMessage] | None = None
        self.ready = anyio.Event()

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self.lines:
            refusal = refusal_of(line)
            if refusal is None:
                yield line
                continue
            await self.ready.wait()
            assert self.answers is not None
            await self.answers.send(SessionMessage(refusal))


async def serve(server: MCPServer[None]) -> None:
    """``server`` over this process's stdin and stdout, behind the guard."""
    text = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
    guarded = GuardedLines(anyio.wrap_file(text))
    async with stdio_server(stdin=cast(Any, guarded)) as (read_stream, write_stream):
        guarded.answers = write_stream
        guarded.ready.set()
        # The SDK's own stdio runner, with our stdin (MCPServer.run_stdio_async builds its own).
        lowlevel = server._lowlevel_server
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
