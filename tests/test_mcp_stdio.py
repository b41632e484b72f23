"""``keymem mcp`` as an agent host runs it: a real subprocess over stdio, real supervised services.

Each session is the SDK's stdio client spawning ``python -m keymem.services.cli mcp`` in a temporary
KEYMEM_HOME; the server's stderr goes to a file the test reads. Covers the tool and prompt
listing with their schemas, the key walk, argument errors, concurrent writers from two
servers, a cold start by several servers at once (one supervisord), and services that cannot
start (every tool names the log).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import httpx2
import psutil
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from keymem.protocol.client import Client as RouterClient
from keymem.protocol.endpoints import ipc_endpoints
from keymem.store.database import graph_path
from tests.ports import free_port
from tests.supervised import Deployment, deployment_env
from tests.test_mcp_tools import TOOLS

pytestmark = pytest.mark.supervised

HOST_ENV = ("CLAUDE_CODE_SESSION_ID", "CODEX_THREAD_ID", "KEYMEM_HOOK_INSTALLED")
WRITES_PER_CLIENT = 25
COLD_STARTERS = 3
STILL_STARTING = "unavailable: keymem's services are still starting"
START_GIVE_UP_S = 180  # a cold start on a loaded machine; each call waits its own deadline


def fresh_home() -> Path:
    return Path(tempfile.mkdtemp(prefix="km-", dir="/tmp"))  # ipc paths must stay short


def host_free_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in deployment_env(home, **extra).items() if k not in HOST_ENV}
    return {**env, **extra}


@pytest.fixture(scope="module")
def running() -> Iterator[Deployment]:
    home = fresh_home()
    deployed = Deployment(home, host_free_env(home))
    try:
        deployed.keymem("up")
        yield deployed
    finally:
        deployed.keymem("down", check=False)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def cold(short_home: Path) -> Iterator[Deployment]:
    deployed = Deployment(short_home, host_free_env(short_home))
    yield deployed
    deployed.keymem("down", check=False)


@asynccontextmanager
async def mcp_session(
    deployment: Deployment, errlog: TextIO, *args: str, **env: str
) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "keymem.services.cli", "mcp", *args],
        env={**deployment.env, **env},
    )
    async with Client(stdio_client(params, errlog=errlog)) as client:
        yield client


def run(deployment: Deployment, work: Any, *args: str, **env: str) -> Any:
    """Run ``work(client)`` in one stdio session; returns its result and the server's stderr."""
    with tempfile.TemporaryFile("w+") as errlog:

        async def session() -> Any:
            async with mcp_session(deployment, errlog, *args, **env) as client:
                return await work(client)

        result = asyncio.run(session())
        errlog.seek(0)
        return result, errlog.read()


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    structured: dict[str, Any] | None = result.structured_content
    assert structured is not None
    return structured


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result.structured_content
    text: str = getattr(result.content[0], "text", "")
    return text


async def once_started(client: Client, name: str, arguments: dict[str, Any]) -> CallToolResult:
    """``name``'s result once the services' start-up has ended: a call that met its deadline
    while they were still starting says so, and is made again."""
    give_up = time.monotonic() + START_GIVE_UP_S
    while True:
        result = await client.call_tool(name, arguments)
        text = getattr(result.content[0], "text", "") if result.is_error else ""
        if not text.startswith(f"Error executing tool {name}: {STILL_STARTING}"):
            return result
        assert time.monotonic() < give_up, text


def router(deployment: Deployment) -> RouterClient:
    return RouterClient(ipc_endpoints(deployment.home).frontend, timeout_ms=10_000)


def supervisords(deployment: Deployment) -> int:
    return sum("supervisord" in " ".join(p.cmdline()) for p in deployment.processes())


def test_lists_tools_prompt_and_schemas(running: Deployment) -> None:
    async def work(client: Client) -> Any:
        tools = (await client.list_tools()).tools
        prompts = (await client.list_prompts()).prompts
        prompt = await client.get_prompt("memory_system_prompt")
        return client.instructions, tools, prompts, getattr(prompt.messages[0].content, "text", "")

    (instructions, tools, prompts, prompt), stderr = run(running, work)
    assert stderr.strip() == "", stderr  # services already up: nothing to say, nothing on stdout
    assert {t.name for t in tools} == TOOLS
    schemas = {t.name: (t.input_schema, t.output_schema) for t in tools}
    recall_in, recall_out = schemas["recall"]
    assert recall_in["required"] == ["query"]
    assert (
        recall_in["properties"]["top_k"]["minimum"],
        recall_in["properties"]["top_k"]["maximum"],
    ) == (1, 20)
    assert set(recall_out["required"]) >= {"status", "query", "namespace", "keys", "memories"}
    remember_in, remember_out = schemas["remember"]
    assert remember_in["required"] == ["content", "keys"]
    assert remember_out["properties"]["saved"]["type"] == "string"
    assert all(output is not None for _, output in schemas.values())
    assert [p.name for p in prompts] == ["memory_system_prompt"]
    assert "recall" in prompt and "remember" in prompt
    assert instructions is not None and "memories under" in instructions and "links" in instructions

    hooked, _ = run(running, work, KEYMEM_HOOK_INSTALLED="true")
    assert "<keymem-surfaced>" in hooked[3] and "<keymem-surfaced>" not in prompt


def test_remember_recall_read_key_read_memory_walk(running: Deployment) -> None:
    async def work(client: Client) -> dict[str, Any]:
        saved = [
            ok(
                await client.call_tool(
                    "remember", {"content": content, "keys": keys, "namespace": "story"}
                )
            )
            for content, keys in [
                ("Newton discovered gravity when an apple fell", ["Newton", "apple", "gravity"]),
                ("apples are a fruit", ["apple", "fruit", "사과"]),
                ("the user likes strawberries", ["strawberry", "fruit", "딸기"]),
            ]
        ]
        recalled = ok(await client.call_tool("recall", {"query": "Newton", "namespace": "story"}))
        preview = recalled["memories"][0]
        apple = next(k for k in preview["connected_keys"] if k["concept"] == "apple")
        under_apple = ok(
            await client.call_tool(
                "read_key", {"key_id": apple["key_id"], "query": "fruit", "namespace": "story"}
            )
        )
        fruit_memory = under_apple["memories"][0]["memory_id"]
        read = ok(
            await client.call_tool(
                "read_memory",
                {"memory_id": fruit_memory, "via_key_id": apple["key_id"], "namespace": "story"},
            )
        )
        fruit = next(k for k in read["memory"]["keys"] if k["concept"] == "fruit")
        onward = ok(
            await client.call_tool(
                "read_key",
                {"key_id": fruit["key_id"], "query": "strawberries", "namespace": "story"},
            )
        )
        return {
            "saved": [s["saved"] for s in saved],
            "recalled": recalled,
            "under_apple": under_apple,
            "read": read,
            "onward": onward,
        }

    out, _ = run(running, work, CLAUDE_CODE_SESSION_ID="cc-walk")
    newton, fruit, strawberry = out["saved"]
    recalled = out["recalled"]
    assert recalled["status"] == "found" and recalled["keys"][0]["concept"] == "Newton"
    assert recalled["memories"][0]["id"] == newton
    assert out["under_apple"]["total"] == 2
    assert out["under_apple"]["memories"][0]["memory_id"] == fruit  # ranked by "fruit"
    memory = out["read"]["memory"]
    assert memory["content"] == "apples are a fruit" and memory["access_count"] == 1
    assert memory["source"]["host_agent"] == "claude-code"
    assert memory["source"]["host_session"] == "cc-walk" and memory["source"]["tool"] == "remember"
    # Newton -> apple -> fruit -> strawberry: the graph connects what no query word names
    assert strawberry in [h["memory_id"] for h in out["onward"]["memories"]]


def test_invalid_arguments_come_back_as_tool_errors(running: Deployment) -> None:
    async def work(client: Client) -> tuple[list[str], dict[str, Any]]:
        texts = [
            error_text(await client.call_tool("recall", {"query": "x", "top_k": 0})),
            error_text(await client.call_tool("remember", {"content": "c", "keys": "not a list"})),
            error_text(await client.call_tool("read_memory", {"memory_id": "000000000000"})),
            error_text(
                await client.call_tool("correct", {"memory_id": "000000000000", "content": "c"})
            ),
            error_text(await client.call_tool("no_such_tool", {})),
        ]
        still = ok(await client.call_tool("browse_keys", {}))  # the server is still serving
        return texts, still

    (texts, still), stderr = run(running, work)
    assert "greater than or equal to 1" in texts[0]
    assert "keys" in texts[1] and "valid list" in texts[1]
    assert "not_found" in texts[2] and "000000000000" in texts[2]
    assert "not_found" in texts[3]
    assert "no_such_tool" in texts[4]
    assert still["namespace"] == "default"
    assert not [text for text in texts if "pydantic" in text or "https://" in text]
    assert "Traceback" not in stderr


def test_two_concurrent_clients_writing_at_once_lose_nothing(running: Deployment) -> None:
    async def writer(name: str) -> list[str]:
        with tempfile.TemporaryFile("w+") as errlog:
            async with mcp_session(running, errlog) as client:
                results = await asyncio.gather(
                    *(
                        client.call_tool(
                            "remember",
                            {
                                "content": f"{name} wrote fact number {i}",
                                "keys": [f"{name} topic", f"fact {i}"],
                                "namespace": "concurrent",
                            },
                        )
                        for i in range(WRITES_PER_CLIENT)
                    )
                )
        return [ok(r)["saved"] for r in results]

    async def both() -> list[list[str]]:
        return list(await asyncio.gather(writer("alice"), writer("bob")))

    saved = [memory_id for ids in asyncio.run(both()) for memory_id in ids]
    assert len(set(saved)) == 2 * WRITES_PER_CLIENT
    with router(running) as client:
        counts = client.call("memory", "counts", {})
        found = client.call("memory", "get_memories", {"ids": saved, "namespace": "concurrent"})
    assert counts["namespaces"]["concurrent"]["memories"] == 2 * WRITES_PER_CLIENT
    assert found["missing"] == [] and len(found["memories"]) == 2 * WRITES_PER_CLIENT


def test_cold_start_by_several_servers_starts_one_supervisord(cold: Deployment) -> None:
    assert supervisords(cold) == 0

    async def starter(i: int, errlog: TextIO) -> str:
        async with mcp_session(cold, errlog) as client:
            arguments = {"content": f"cold fact {i}", "keys": ["cold"]}
            saved = ok(await once_started(client, "remember", arguments))
            return str(saved["saved"])

    async def all_at_once() -> tuple[list[str], list[str]]:
        with contextlib.ExitStack() as files:
            logs = [files.enter_context(tempfile.TemporaryFile("w+")) for _ in range(COLD_STARTERS)]
            ids = await asyncio.gather(*(starter(i, log) for i, log in enumerate(logs)))
            texts = []
            for log in logs:
                log.seek(0)
                texts.append(log.read())
            return list(ids), texts

    ids, stderrs = asyncio.run(all_at_once())
    assert len(set(ids)) == COLD_STARTERS
    assert supervisords(cold) == 1
    announced = [text for text in stderrs if "starting the background services" in text]
    assert len(announced) == 1, stderrs
    assert str(cold.home / "logs") in announced[0]
    with router(cold) as client:
        assert client.call("memory", "counts", {})["memories"] == COLD_STARTERS


def test_a_cold_start_answers_the_handshake_and_the_first_recall_once_up(cold: Deployment) -> None:
    async def work(client: Client) -> tuple[str | None, int, list[str], dict[str, Any]]:
        # The handshake is over and the tools are listed before the services are ready.
        instructions, tools = client.instructions, len((await client.list_tools()).tools)
        recalled = await once_started(client, "recall", {"query": "anything"})
        status = cold.status()
        return instructions, tools, sorted(status["services"]), ok(recalled)

    (instructions, tools, services, recalled), stderr = run(cold, work)
    assert instructions is not None and "starting in the background" in instructions
    assert tools == len(TOOLS)
    assert recalled["status"] == "no_match" and recalled["keys"] == []
    assert len(services) == 5
    assert "starting the background services" in stderr and str(cold.home / "logs") in stderr


def test_services_that_cannot_start_make_every_tool_name_the_log(cold: Deployment) -> None:
    async def work(client: Client) -> tuple[str | None, list[str]]:
        texts = [
            error_text(await once_started(client, "recall", {"query": "anything"})),
            error_text(await client.call_tool("remember", {"content": "c", "keys": ["kk"]})),
        ]
        return client.instructions, texts

    graph_path(cold.home).write_bytes(b"not a graph")  # the graph cannot open it: it stays down
    (instructions, texts), stderr = run(cold, work, "--timeout", "10")
    # The handshake did not wait out the 10 s in which the graph never came up.
    assert instructions is not None and "starting in the background" in instructions
    for text in texts:
        assert "keymem could not be started" in text
        assert str(cold.home / "logs" / "graph.log") in text
    assert "every tool will say so" in stderr


SEED_MEMORIES = 1_000
BATCH_SEED = 200
TIMED_CALLS = 100
ROUND_TRIP_P50_CEILING_MS = 250  # generous: a regression guard, not the goal


@pytest.mark.slow
def test_tool_round_trip_p50_for_recall_and_remember(running: Deployment) -> None:
    """MCP tool round trip over stdio (client call → server → router → services → reply).

    Run with ``pytest -m slow -s tests/test_mcp_stdio.py -k round_trip``; prints p50/p95.
    """
    topics = ["coffee", "tea", "Python", "Rust", "Seoul", "Busan", "strawberry", "apple"]

    async def timed(client: Client, name: str, args: list[dict[str, Any]]) -> list[float]:
        elapsed = []
        for arguments in args:
            started = time.perf_counter()
            ok(await client.call_tool(name, arguments))
            elapsed.append((time.perf_counter() - started) * 1000)
        return sorted(elapsed)

    async def work(client: Client) -> dict[str, list[float]]:
        for start in range(0, SEED_MEMORIES, BATCH_SEED):
            items = [
                {
                    "content": f"note {i}: the user mentioned {topics[i % 8]} on day {i}",
                    "keys": [topics[i % 8], f"day {i}", f"note {i}"],
                    "namespace": "timing",
                }
                for i in range(start, start + BATCH_SEED)
            ]
            ok(await client.call_tool("remember_batch", {"items": items}))
        recalls = [{"query": topics[i % 8], "namespace": "timing"} for i in range(TIMED_CALLS)]
        remembers = [
            {"content": f"timed fact {i}", "keys": [f"timed {i}", "timing"], "namespace": "timing"}
            for i in range(TIMED_CALLS)
        ]
        return {
            "recall": await timed(client, "recall", recalls),
            "remember": await timed(client, "remember", remembers),
        }

    measured, _ = run(running, work)
    for name, elapsed in measured.items():
        p50, p95 = elapsed[len(elapsed) // 2], elapsed[int(len(elapsed) * 0.95)]
        print(
            f"\nMCP {name} round trip at {SEED_MEMORIES} memories: "
            f"p50 {p50:.1f} ms, p95 {p95:.1f} ms"
        )
        assert p50 < ROUND_TRIP_P50_CEILING_MS, (name, p50)


HOOK_SETTLE_S = 10.0  # the lexicon indexes writes asynchronously; the hook may ask before that


def hook(deployment: Deployment, prompt: str) -> str:
    """``keymem-hook`` as a host runs it: host JSON on stdin; its additionalContext (or "")."""
    payload = {
        "session_id": "story",
        "cwd": str(deployment.home),
        "hook_event_name": "UserPromptSubmit",
        "prompt": prompt,
    }
    completed = subprocess.run(
        [str(Path(sys.executable).with_name("keymem-hook"))],
        input=json.dumps(payload),
        env=deployment.env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert completed.returncode == 0, completed.stderr
    if not completed.stdout.strip():
        return ""
    context: str = json.loads(completed.stdout)["hookSpecificOutput"]["additionalContext"]
    return context


def test_facts_saved_through_mcp_surface_in_a_later_hook_call(running: Deployment) -> None:
    story = [
        ("Newton discovered gravity when an apple fell", ["Newton", "apple", "gravity", "뉴턴"]),
        ("apples are a fruit", ["apple", "fruit", "사과", "과일"]),
        ("the user likes strawberries", ["strawberry", "fruit", "딸기", "과일"]),
    ]

    async def work(client: Client) -> list[str]:
        return [
            ok(await client.call_tool("remember", {"content": content, "keys": keys}))["saved"]
            for content, keys in story
        ]

    (newton, _, _), _ = run(running, work)
    give_up = time.monotonic() + HOOK_SETTLE_S
    while newton not in (context := hook(running, "What did Newton discover about gravity?")):
        assert time.monotonic() < give_up, f"the hook never surfaced {newton}: {context!r}"
        time.sleep(0.2)
    assert "<keymem-surfaced>" in context and "Newton discovered gravity" in context


HTTP_UP_S = 60.0


@contextlib.contextmanager
def http_server(deployment: Deployment) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``keymem mcp --http`` on a free loopback port, stopped however the test ends."""
    port = free_port()
    with tempfile.TemporaryFile("w+") as errlog:
        server = subprocess.Popen(
            [sys.executable, "-m", "keymem.services.cli", "mcp", "--http", "--port", str(port)],
            env=deployment.env,
            stdout=subprocess.DEVNULL,
            stderr=errlog,
        )
        try:
            give_up = time.monotonic() + HTTP_UP_S
            while True:
                if server.poll() is not None:
                    errlog.seek(0)
                    raise AssertionError(f"keymem mcp --http exited: {errlog.read()}")
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                assert time.monotonic() < give_up, "keymem mcp --http never listened"
                time.sleep(0.1)
            yield f"http://127.0.0.1:{port}/mcp", server
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}


def test_mcp_over_http_serves_the_tools_to_the_token_only(running: Deployment) -> None:
    async def with_token(url: str, token: str) -> tuple[set[str], dict[str, Any]]:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            tools = {t.name for t in (await client.list_tools()).tools}
            arguments = {"content": "the HTTP client saved this", "keys": ["http transport"]}
            saved = ok(await client.call_tool("remember", arguments))["saved"]
            read = ok(await client.call_tool("read_memory", {"memory_id": saved}))
            return tools, read["memory"]

    async def refused(url: str, headers: dict[str, str]) -> int:
        async with httpx2.AsyncClient() as http:
            answer = await http.post(
                url,
                json=INITIALIZE,
                headers={**headers, "Accept": "application/json, text/event-stream"},
            )
            return answer.status_code

    with http_server(running) as (url, server):
        token_file = running.home / "mcp-token"
        assert token_file.stat().st_mode & 0o777 == 0o600
        token = token_file.read_text().strip()
        listening = [
            c.laddr
            for c in psutil.Process(server.pid).net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN
        ]
        tools, memory = asyncio.run(with_token(url, token))
        statuses = [
            asyncio.run(refused(url, headers))
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token})
        ]
    assert [address.ip for address in listening] == ["127.0.0.1"]
    assert tools == TOOLS
    assert memory["content"] == "the HTTP client saved this"
    assert statuses == [401, 401, 401]


def test_mcp_over_http_binds_beyond_loopback_only_when_allowed(running: Deployment) -> None:
    refused = running.keymem("mcp", "--http", "--host", "0.0.0.0", check=False)
    assert refused.returncode == 2
    assert "not a loopback address" in refused.stderr and "--allow-remote" in refused.stderr
