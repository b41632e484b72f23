"""Concurrent ``remember`` calls on one MCP session share their trips (services/mcp/coalesce.py).

The real MCP server over every real service in process (tests/full_stack.py), reached through
the SDK's client with several tool calls in flight at once. The router's own count of
``memory`` requests shows how many trips the calls took.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from mcp import Client
from mcp_types import CallToolResult

from keymem.protocol.client import IDEMPOTENCY_KEY
from keymem.protocol.errors import NotFound, outcome_from_wire
from keymem.services.mcp.backend import MemoryBackend
from keymem.services.mcp.provenance import Provenance
from keymem.services.mcp.server import build_server
from tests.full_stack import FullStack, full_stack

IN_FLIGHT = 8
SEQUENTIAL = 5
T = TypeVar("T")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FullStack]:
    with full_stack(tmp_path_factory.mktemp("coalesce")) as running:
        yield running


def session(stack: FullStack, work: Callable[[Client, MemoryBackend], Awaitable[T]]) -> T:
    backend = MemoryBackend(stack.stack.endpoints.frontend, Path("/km/logs"))
    server = build_server(backend, counts=None, provenance=Provenance("test"), hook=False)

    async def run() -> T:
        async with Client(server) as client:
            return await work(client, backend)

    return asyncio.run(run())


def memory_requests(stack: FullStack) -> int:
    """The requests the router has passed to the ``memory`` service so far."""
    return int(stack.client.call("router", "stats")["services"]["memory"]["requests"])


def fact(word: str, namespace: str = "coalesce") -> dict[str, Any]:
    return {
        "content": f"the courier left parcel {word} at the blue door",
        "keys": ["courier", "parcel", "blue door"],
        "namespace": namespace,
    }


def structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    content: dict[str, Any] | None = result.structured_content
    assert content is not None
    return content


def test_calls_in_flight_share_trips_and_each_gets_its_own_reply(stack: FullStack) -> None:
    words = [f"zq{secrets.token_hex(4)}" for _ in range(IN_FLIGHT)]
    twice = stack.remember(fact(words[0])["content"], ["courier"], "coalesce")
    before = memory_requests(stack)

    async def work(client: Client, _: MemoryBackend) -> list[CallToolResult]:
        calls = [client.call_tool("remember", fact(word)) for word in words]
        return list(await asyncio.gather(*calls))

    replies = [structured(r) for r in session(stack, work)]
    trips = memory_requests(stack) - before
    assert 1 <= trips < IN_FLIGHT, trips
    saved = [r["saved"] for r in replies]
    assert len(set(saved)) == IN_FLIGHT
    # each reply is its own call's: its memory holds its word, its dedup verdict its own
    held = stack.memory("get_memories", {"ids": saved, "namespace": "coalesce"})["memories"]
    content = {m["id"]: m["content"] for m in held}
    assert [word in content[i] for word, i in zip(words, saved, strict=True)] == [True] * IN_FLIGHT
    assert [r["superseded"] for r in replies] == [twice] + [None] * (IN_FLIGHT - 1)
    assert [r["deduplicated"] for r in replies] == [True] + [False] * (IN_FLIGHT - 1)


def test_a_bad_call_among_concurrent_ones_gets_its_own_error_and_the_rest_land(
    stack: FullStack,
) -> None:
    words = [f"zq{secrets.token_hex(4)}" for _ in range(IN_FLIGHT)]
    bodies = [fact(word) for word in words]
    bodies[2] = {**bodies[2], "related_to": ["0123456789ab"]}  # no such memory: the graph says so
    bodies[5] = {**bodies[5], "keys": ["x"]}  # too short to be a key: none usable

    async def work(client: Client, _: MemoryBackend) -> list[CallToolResult]:
        return list(await asyncio.gather(*(client.call_tool("remember", b) for b in bodies)))

    results = session(stack, work)
    failed = {i: r.content[0] for i, r in enumerate(results) if r.is_error}
    assert sorted(failed) == [2, 5]
    assert "0123456789ab" in getattr(failed[2], "text", "")
    assert "no usable key" in getattr(failed[5], "text", "")
    landed = [structured(r)["saved"] for i, r in enumerate(results) if i not in failed]
    held = stack.memory("get_memories", {"ids": landed, "namespace": "coalesce"})["memories"]
    assert len(held) == IN_FLIGHT - 2


def test_a_lone_call_goes_at_once_as_a_plain_remember(stack: FullStack) -> None:
    """Nothing in flight: every call is its own trip, sent as it comes (no window to wait
    for), so sequential calls make exactly one memory request each."""
    before = memory_requests(stack)

    async def work(client: Client, _: MemoryBackend) -> list[dict[str, Any]]:
        return [
            structured(await client.call_tool("remember", fact(f"zq{secrets.token_hex(4)}")))
            for _ in range(SEQUENTIAL)
        ]

    assert len({r["saved"] for r in session(stack, work)}) == SEQUENTIAL
    assert memory_requests(stack) - before == SEQUENTIAL


def test_a_coalesced_call_sent_again_under_its_key_is_not_saved_twice(stack: FullStack) -> None:
    items = [
        {**fact(f"zq{secrets.token_hex(4)}"), IDEMPOTENCY_KEY: secrets.token_hex(16)}
        for _ in range(3)
    ]
    first = stack.memory("remember_each", {"items": items})["results"]
    saved = [outcome_from_wire(o)["saved"] for o in first]
    count = stack.memory("counts", {"namespace": "coalesce"})
    again = stack.memory("remember", items[1])
    assert again["saved"] == saved[1]
    resent = stack.memory("remember_each", {"items": items})["results"]
    assert [outcome_from_wire(o)["saved"] for o in resent] == saved
    assert stack.memory("counts", {"namespace": "coalesce"}) == count


def test_an_item_the_graph_refuses_is_its_own_typed_error(stack: FullStack) -> None:
    items = [fact(f"zq{secrets.token_hex(4)}"), {**fact("x"), "related_to": ["0123456789ab"]}]
    first, second = stack.memory("remember_each", {"items": items})["results"]
    assert isinstance(outcome_from_wire(first)["saved"], str)
    assert isinstance(outcome_from_wire(second), NotFound)


def test_each_acknowledged_call_is_found_by_the_very_next_search(stack: FullStack) -> None:
    """The query word is in the text only (no key names it): only the lexicon finds it, so
    the search finds it only if the coalesced write moved the memory service's horizon."""

    async def work(client: Client, backend: MemoryBackend) -> list[bool]:
        async def one() -> bool:
            word = f"zq{secrets.token_hex(4)}"
            saved = structured(await client.call_tool("remember", fact(word, "ryw")))["saved"]
            found = await backend.client.call(
                "memory", "search", {"query": word, "namespace": "ryw"}
            )
            return saved in [m["memory_id"] for m in found["memories"]]

        return list(await asyncio.gather(*(one() for _ in range(IN_FLIGHT))))

    assert session(stack, work) == [True] * IN_FLIGHT
