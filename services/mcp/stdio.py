"""The MCP server's stdio loop, with a guard in front of the SDK's message parser.

The SDK parses each stdin line with pydantic, which stops at 200 levels of nesting; a line it
cannot parse is dropped without an answer, so an agent that sent a deeply nested argument (or a
huge line) waited out its own timeout. The guard reads each line first: one that is larger than
``LINE_MAX_BYTES`` or nested deeper than ``MESSAGE_MAX_DEPTH`` is answered at once with a
JSON-RPC error carrying the request's id (invalid params), and never reaches the SDK. Every
other line passes through unchanged; the tools' own schemas and keymem's services check the
rest (a ``source`` is held to ``fields.FREE_FORM_MAX_DEPTH``).

When stdin and stdout are pipes or sockets (as every MCP host spawns its server), they are
read and written on the event loop (``PipeLines``, ``PipeWriter``): the SDK's transport hands
each line it reads, and each reply's write and flush, to a worker thread and back, and on a
loaded machine every hand-off waits for that thread to be scheduled. While the server runs, fd
1 points at stderr as the SDK arranges it (a library's stray print never reaches the wire). A
file or a terminal is read and written through threads as before (the loop must not make a
terminal non-blocking under its shell). A tool call is taken off this loop and served by the
SDK's request kernel in a task of its own (``direct.py``), past the SDK's streams and
dispatcher.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import stat
import sys
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any, cast

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_PARAMS, INVALID_REQUEST, ErrorData, JSONRPCError

from keymem.protocol.fields import FREE_FORM_MAX_DEPTH, depth_of
from keymem.services.mcp.direct import DirectCalls

# A remember_batch of 200 memories of 20,000 characters, with keys, fits with room to spare.
LINE_MAX_BYTES = 16 * 1024 * 1024
# The envelope (params, arguments, items, an item) plus a source at its own limit.
MESSAGE_MAX_DEPTH = FREE_FORM_MAX_DEPTH + 8
# A pipe's line that has not ended after this many bytes is skipped to its end unread (and
# refused by the id in its head); up to it, a line is read whole and judged as any other.
PIPE_LINE_LIMIT_BYTES = 4 * LINE_MAX_BYTES
# What of a skipped line is kept to find its id in.
ID_SEARCH_BYTES = 65_536
PIPE_READ_BYTES = 65_536  # one read from the pipe at most (a pipe's buffer)
# An id found without parsing the line (one too deep or too large to parse).
_ID = re.compile(r'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")')


def _id_of(line: str, message: Any) -> str | int | None:
    if isinstance(message, dict):
        found = message.get("id")
        return found if isinstance(found, str | int) and not isinstance(found, bool) else None
    match = _ID.search(line[:ID_SEARCH_BYTES])
    if match is None:
        return None
    value = json.loads(match.group(1))
    return value if isinstance(value, str | int) else None


def judged(line: str) -> tuple[JSONRPCError | None, Any]:
    """The error that answers ``line`` at once (None to let it through), and the line parsed
    (None when it is not JSON, too large or too deep to parse)."""
    size = len(line.encode("utf-8", "replace"))
    if size > LINE_MAX_BYTES:
        refusal = _error(
            _id_of(line, None),
            INVALID_REQUEST,
            f"message of {size} bytes; keymem takes at most {LINE_MAX_BYTES}",
        )
        return refusal, None
    try:
        message = json.loads(line)
    except RecursionError:
        message = None
    except ValueError:
        return None, None  # not JSON: the SDK reports that itself
    if message is not None and _openers(line) <= MESSAGE_MAX_DEPTH:
        return None, message  # no deeper than its brackets: the walk is not needed
    depth = MESSAGE_MAX_DEPTH + 1 if message is None else depth_of(message, MESSAGE_MAX_DEPTH)
    if depth <= MESSAGE_MAX_DEPTH:
        return None, message
    refusal = _error(
        _id_of(line, message),
        INVALID_PARAMS,
        f"the message is nested more than {MESSAGE_MAX_DEPTH} levels deep; keymem takes a "
        f"source nested at most {FREE_FORM_MAX_DEPTH} levels",
    )
    return refusal, None


def _openers(line: str) -> int:
    """How many ``{`` and ``[`` the line holds: a bound on the depth of what it parses to."""
    return line.count("{") + line.count("[")


@dataclass(frozen=True)
class Oversized:
    """A line longer than ``PIPE_LINE_LIMIT_BYTES``: its head and its size in bytes."""

    head: str
    size: int


def oversized_refusal(line: Oversized) -> JSONRPCError:
    return _error(
        _id_of(line.head, None),
        INVALID_REQUEST,
        f"message of more than {line.size} bytes; keymem takes at most {LINE_MAX_BYTES}",
    )


def _error(request_id: str | int | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))


class PipeLines:
    """A pipe's (or socket's) lines, read on the event loop as its data arrives."""

    def __init__(
        self, reader: asyncio.StreamReader, line_limit: int = PIPE_LINE_LIMIT_BYTES
    ) -> None:
        self.reader = reader
        self.line_limit = line_limit

    async def __aiter__(self) -> AsyncIterator[str | Oversized]:
        pending = bytearray()
        skipped = 0  # bytes of an oversized line read so far (its head kept in ``pending``)
        while chunk := await self.reader.read(PIPE_READ_BYTES):
            held = len(pending)  # the line so far (or, skipping, its head)
            start = 0 if skipped else held
            pending += chunk
            while (end := pending.find(b"\n", start)) >= 0:
                if skipped:
                    head = bytes(pending[:ID_SEARCH_BYTES]).decode("utf-8", "replace")
                    yield Oversized(head, skipped + end - held)
                    skipped = 0
                else:
                    yield pending[:end].decode("utf-8", "replace")
                del pending[: end + 1]
                start = 0
            if skipped:
                skipped += len(chunk)
                del pending[ID_SEARCH_BYTES:]
            elif len(pending) > self.line_limit:
                skipped = len(pending)
                del pending[ID_SEARCH_BYTES:]
        if pending and not skipped:
            yield pending.decode("utf-8", "replace")


async def stdin_lines() -> AsyncIterable[str | Oversized]:
    """This process's stdin as lines: ``PipeLines`` on a pipe or socket, else through a thread."""
    if is_pipe(sys.stdin.fileno()):
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        return PipeLines(reader)
    text = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
    return anyio.wrap_file(text)


def is_pipe(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class PipeWriter:
    """The reply side of the SDK's stdio transport (its ``write`` and ``flush``) on a pipe
    written by the event loop: a write is buffered at once, a flush waits for the pipe to take
    it (so a client that stops reading slows the server, as a blocking write would)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    async def write(self, text: str) -> None:
        self.writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self.writer.drain()


@asynccontextmanager
async def pipe_stdout() -> AsyncIterator[PipeWriter | None]:
    """A ``PipeWriter`` on the wire when stdout is a pipe or socket (None otherwise: the SDK
    then claims stdout itself), with fd 1 pointing at stderr until the server ends."""
    if not is_pipe(sys.stdout.fileno()):
        yield None
        return
    sys.stdout.flush()
    wire = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    loop = asyncio.get_running_loop()
    try:
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(wire, "wb", buffering=0)
        )
    except BaseException:
        os.dup2(wire, sys.stdout.fileno())
        os.close(wire)
        raise
    transport.set_write_buffer_limits(high=0)  # a drain waits until the pipe took everything
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    try:
        yield PipeWriter(writer)
    finally:
        os.dup2(wire, sys.stdout.fileno())
        with suppress(OSError):  # what is still buffered goes first, if a reader is left
            await writer.drain()
        writer.close()


class GuardedLines:
    """stdin's lines minus the ones ``judged`` refuses (answered through ``answers``) and the
    ones ``direct`` takes."""

    def __init__(
        self, lines: AsyncIterable[str | Oversized], direct: DirectCalls | None = None
    ) -> None:
        self.lines = lines
        self.direct = direct
        self.answers: MemoryObjectSendStream[SessionMessage] | None = None
        self.ready = anyio.Event()

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self.lines:
            message = None
            if isinstance(line, Oversized):
                refusal: JSONRPCError | None = oversized_refusal(line)
            else:
                refusal, message = judged(line)
            if refusal is None:
                assert isinstance(line, str)
                if self.direct is None or not self.direct.take(message):
                    yield line
                continue
            await self.ready.wait()
            assert self.answers is not None
            await self.answers.send(SessionMessage(refusal))


async def serve(server: MCPServer[None]) -> None:
    """``server`` over this process's stdin and stdout, behind the guard; its tool calls are
    served by the SDK's kernel from this loop (``DirectCalls``), the rest by the SDK's loop."""
    lowlevel = server._lowlevel_server
    direct = DirectCalls(server)
    lowlevel.middleware.append(direct.middleware)
    guarded = GuardedLines(await stdin_lines(), direct)
    async with (
        pipe_stdout() as stdout,
        stdio_server(stdin=cast(Any, guarded), stdout=cast(Any, stdout)) as (
            read_stream,
            write_stream,
        ),
    ):
        guarded.answers = direct.answers = write_stream
        direct.wire = stdout
        guarded.ready.set()
        # The SDK's own stdio runner, with our stdin (MCPServer.run_stdio_async builds its own).
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
