"""Deeply nested and oversized input: answered at once with a clear error, never a silent drop.

A real ``keymem mcp`` subprocess over stdio, against a real supervised deployment, spoken to in
raw JSON-RPC lines (the SDK's client would refuse to build some of these messages itself). Each
hostile request must get an error reply carrying its id within a second, and the session must
go on serving. The same bounds hold on the wire: a msgpack body nested past them is
``bad_request`` and the service stays up.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.protocol.errors import BadRequest
from tests.supervised import Deployment, running_deployment

pytestmark = pytest.mark.supervised

ANSWER_WITHIN_S = 1.0
REPLY_TIMEOUT_S = 30.0


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


class StdioSession:
    """``keymem mcp`` as a host spawns it, driven one JSON-RPC line at a time."""

    def __init__(self, deployment: Deployment) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "keymem.services.cli", "mcp"],
            env=deployment.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.next_id = 0
        init = self.request(
            "initialize",
            {
                "protocolVersion": LATEST_HANDSHAKE_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "chaos", "version": "0"},
            },
        )
        assert "result" in init, init
        self.send_line(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))

    def send_line(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict[str, Any], raw: str | None = None) -> Any:
        """Send one request (``raw``: its exact line) and return the reply to its id."""
        self.next_id += 1
        request_id = self.next_id
        line = raw or json.dumps(
            {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        )
        self.send_line(line.replace('"id": 0', f'"id": {request_id}', 1))
        assert self.process.stdout is not None
        give_up = time.monotonic() + REPLY_TIMEOUT_S
        while time.monotonic() < give_up:
            reply = json.loads(self.process.stdout.readline())
            if reply.get("id") == request_id:
                return reply
        raise AssertionError(f"no reply to request {request_id}")

    def tool(self, name: str, arguments: dict[str, Any]) -> tuple[Any, float]:
        started = time.monotonic()
        reply = self.request("tools/call", {"name": name, "arguments": arguments})
        return reply, time.monotonic() - started

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    with running_deployment() as deployed:
        yield deployed


@pytest.fixture(scope="module")
def session(deployment: Deployment) -> Iterator[StdioSession]:
    opened = StdioSession(deployment)
    yield opened
    opened.close()


def remember(source: Any) -> dict[str, Any]:
    return {"content": "A fact with provenance", "keys": ["provenance"], "source": source}


@pytest.mark.parametrize("levels", [200, 900])
def test_a_source_nested_past_the_parser_is_refused_at_once(
    session: StdioSession, levels: int
) -> None:
    reply, elapsed = session.tool("remember", remember(nested(levels)))
    assert elapsed < ANSWER_WITHIN_S
    assert reply["error"]["code"] == -32602 and "nested" in reply["error"]["message"]


def test_a_line_nested_past_pythons_parser_is_refused_by_id(session: StdioSession) -> None:
    depth = 100_000
    arguments = '{"content": "x", "keys": ["kk"], "source": ' + "[" * depth + "]" * depth + "}"
    line = (
        '{"jsonrpc": "2.0", "id": 0, "method": "tools/call", "params": '
        f'{{"name": "remember", "arguments": {arguments}}}}}'
    )
    started = time.monotonic()
    reply = session.request("tools/call", {}, raw=line)
    assert time.monotonic() - started < ANSWER_WITHIN_S
    assert "nested" in reply["error"]["message"]


def test_a_source_within_the_parser_but_past_keymems_bound_is_a_tool_error(
    session: StdioSession,
) -> None:
    reply, elapsed = session.tool("remember", remember(nested(18)))
    assert elapsed < ANSWER_WITHIN_S
    result = reply["result"]
    assert result["isError"] and "nested more than 16 levels" in result["content"][0]["text"]


def test_the_session_goes_on_and_a_reasonable_source_is_kept(
    session: StdioSession, deployment: Deployment
) -> None:
    reply, _ = session.tool("remember", remember(nested(3)))
    saved = reply["result"]["structuredContent"]["saved"]
    read, _ = session.tool("read_memory", {"memory_id": saved})
    assert read["result"]["structuredContent"]["memory"]["source"]["a"] == nested(2)


def test_a_wire_body_nested_past_the_bound_is_bad_request_and_the_graph_stays_up(
    deployment: Deployment,
) -> None:
    with Client(ipc_endpoints(deployment.home).frontend, timeout_ms=10_000) as client:
        with pytest.raises(BadRequest, match="nested"):
            client.call("memory", "remember", remember(nested(40)))
        assert client.call("graph", "ping") is not None
