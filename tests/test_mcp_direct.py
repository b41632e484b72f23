"""Tool calls answered on the stdio loop (services/mcp/direct.py), in both protocol eras.

A real ``keymem mcp`` server process over real pipes, spoken to line by line as a host speaks
to it (a handshake-era host such as Claude Code, and the 2026-era envelope the SDK's own
client sends), in front of a real broker whose ``memory`` service is a stub: what is tested is
the server's answer on the wire — the era's result shape, errors, a cancelled call never
answered while later calls are.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keymem.protocol.endpoints import ipc_endpoints
from keymem.protocol.worker import Service
from keymem.services.stack import InprocStack

SLOW = "slow"  # content the stub answers only after SLOW_S
SLOW_S = 3.0
ANSWER_S = 10.0  # how long a reply may take on a loaded machine
START_S = 60.0  # the first: the server imports the SDK first (seconds of CPU at load 30)
SERVER = """
import sys
import tempfile
from pathlib import Path
import anyio
from keymem.services.mcp.backend import MemoryBackend
from keymem.services.mcp.provenance import Provenance
from keymem.services.mcp.server import build_server
from keymem.services.mcp.stdio import serve
backend = MemoryBackend(sys.argv[1], Path(tempfile.gettempdir()))
server = build_server(backend, counts=None, provenance=Provenance("test"), hook=False)
anyio.run(serve, server)
"""
HANDSHAKE_VERSION = "2025-06-18"
MODERN_VERSION = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
}
ARGUMENTS = {"content": "the user likes strawberries", "keys": ["fruit", "strawberry"]}


@pytest.fixture
def frontend(short_home: Path) -> Iterator[str]:
    """A broker on ipc whose memory service saves instantly, or after ``SLOW_S``."""
    released = threading.Event()

    def remember(body: dict[str, Any]) -> dict[str, Any]:
        if body["content"] == SLOW:
            released.wait(SLOW_S)
        return {"saved": "m" * 26, "seq": 1}

    service = Service("memory", capacity=4)
    service.add("remember", remember)
    (short_home / "run").mkdir(exist_ok=True)
    endpoints = ipc_endpoints(short_home)
    with InprocStack(endpoints=endpoints) as stack:
        for _ in range(2):  # a slow call must not hold the next one
            stack.add_worker(service)
        yield endpoints.frontend
        released.set()


class Wire:
    """A host's side of the server's stdio: JSON-RPC lines out, lines in by id."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        await self.process.stdin.drain()

    async def receive(self, within_s: float = ANSWER_S) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), within_s)
        assert line, "the server closed its stdout"
        found: dict[str, Any] = json.loads(line)
        return found

    async def call(
        self, request_id: int, method: str, params: dict[str, Any], within_s: float = ANSWER_S
    ) -> dict[str, Any]:
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        reply = await self.receive(within_s)
        assert reply["id"] == request_id
        return reply


async def with_server(frontend: str, session: Any) -> Any:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        SERVER,
        frontend,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        return await session(Wire(process))
    finally:
        assert process.stdin is not None
        process.stdin.close()
        await asyncio.wait_for(process.wait(), ANSWER_S)


async def handshake(wire: Wire) -> None:
    init = {
        "protocolVersion": HANDSHAKE_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "host", "version": "1"},
    }
    reply = await wire.call(0, "initialize", init, START_S)
    assert reply["result"]["protocolVersion"] == HANDSHAKE_VERSION
    await wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    await wire.call(100, "ping", {})  # the SDK has taken the notification in before it answers


def remember(arguments: dict[str, Any], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": "remember", "arguments": arguments, **({"_meta": meta} if meta else {})}


def test_a_handshake_era_host_gets_its_eras_answers_and_errors(frontend: str) -> None:
    async def session(wire: Wire) -> list[dict[str, Any]]:
        await handshake(wire)
        return [
            await wire.call(1, "tools/call", remember(ARGUMENTS)),
            await wire.call(2, "tools/call", remember({"content": "x", "keys": []})),
            await wire.call(3, "tools/call", {"name": "no_such_tool", "arguments": {}}),
            await wire.call(4, "tools/call", {"arguments": {}}),
        ]

    saved, bad, unknown, malformed = asyncio.run(with_server(frontend, session))
    result = saved["result"]
    assert result["structuredContent"]["saved"] == "m" * 26
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    assert "resultType" not in result and "_meta" not in result  # 2026 fields only in 2026
    assert bad["result"]["isError"] is True
    assert bad["result"]["content"][0]["text"].startswith("Error executing tool remember")
    assert "keys" in bad["result"]["content"][0]["text"]
    assert unknown["result"]["isError"] is True  # the SDK's answer, as before
    assert malformed["error"]["code"] == -32602  # invalid params, from the SDK


def test_a_2026_era_request_gets_the_envelope_answer(frontend: str) -> None:
    async def session(wire: Wire) -> dict[str, Any]:
        return await wire.call(1, "tools/call", remember(ARGUMENTS, MODERN_META), START_S)

    result = asyncio.run(with_server(frontend, session))["result"]
    assert result["structuredContent"]["saved"] == "m" * 26
    assert result["resultType"] == "complete"
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "keymem"


def test_a_cancelled_call_is_never_answered_and_the_next_ones_are(frontend: str) -> None:
    async def session(wire: Wire) -> list[dict[str, Any]]:
        await handshake(wire)
        await wire.send(
            {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": remember({**ARGUMENTS, "content": SLOW}),
            }
        )
        await wire.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}
        )
        answers = [await wire.call(8, "tools/call", remember(ARGUMENTS))]
        answers.append(await wire.call(9, "ping", {}))
        try:  # the slow call's reply would come after SLOW_S: none comes
            answers.append(await asyncio.wait_for(wire.receive(), SLOW_S + 1))
        except TimeoutError:
            pass
        return answers

    answers = asyncio.run(with_server(frontend, session))
    assert [a["id"] for a in answers] == [8, 9]
    assert answers[0]["result"]["structuredContent"]["saved"] == "m" * 26
