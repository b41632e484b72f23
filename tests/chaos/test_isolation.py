"""A namespace is a boundary: the isolation table, through every service of a real stack.

Every by-id method and every recall path is called three ways on a memory of namespace
``alpha``: naming ``alpha`` (it must reach the memory), naming another namespace, and leaving
the namespace out (which means ``default``). The last two must be ``not_found`` (or, for the
list-shaped replies, not show the memory), and a refused write must leave the memory exactly as
it was. The MCP tools that act by id carry the namespace through to the graph.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from keymem.protocol.errors import NotFound
from keymem.services.mcp.backend import MemoryBackend
from keymem.services.mcp.provenance import Provenance
from keymem.services.mcp.server import build_server
from tests.full_stack import FullStack, full_stack

HOME = "alpha"
SCOPES = {"named": HOME, "other": "beta", "omitted": None}
PROBE_KEYS = ["orchard", "apple harvest", "cider press"]
QUERY = "Varnholm lighthouse keeper cat Biscuit"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FullStack]:
    with full_stack(tmp_path_factory.mktemp("isolation")) as running:
        yield running


_serial = itertools.count()


def probe(stack: FullStack) -> tuple[str, str]:
    """A fresh memory of ``alpha`` (each case gets its own: some cases delete theirs), and the
    id of one of its keys."""
    content = f"Isolation probe {next(_serial)}: the orchard's apple harvest goes to the press."
    memory_id = stack.remember(content, PROBE_KEYS, namespace=HOME)
    view = stack.memory("get_memories", {"ids": [memory_id], "namespace": HOME})["memories"][0]
    return memory_id, view["keys"][0]["key_id"]


def scoped(body: dict[str, Any], namespace: str | None) -> dict[str, Any]:
    return body if namespace is None else {**body, "namespace": namespace}


def state_of(stack: FullStack, memory_id: str) -> str:
    """Everything a refused call could have changed, as the owner sees it."""
    found = stack.memory(
        "get_memories", {"ids": [memory_id], "namespace": HOME, "include_inactive": True}
    )["memories"]
    return json.dumps(found, sort_keys=True, default=str)


def shows(memory_id: str, reply: Any) -> bool:
    return memory_id in json.dumps(reply, default=str)


Body = Callable[[str, str], dict[str, Any]]
# How a list-shaped reply shows the memory (given memory id, key id and the reply). Those
# methods answer with what is visible, so the memory's absence is their refusal; every other
# method refuses with not_found.
Shown = Callable[[str, str, Any], bool]
BY_ID: dict[str, tuple[str, Body, Shown | None]] = {
    "read_memory": ("memory", lambda m, k: {"memory_id": m, "via_key_id": k}, None),
    "read_key": ("memory", lambda m, k: {"key_id": k}, None),
    "history": ("memory", lambda m, k: {"memory_id": m}, None),
    "forget": ("memory", lambda m, k: {"memory_id": m}, None),
    "correct": ("memory", lambda m, k: {"memory_id": m, "content": f"Sold ({m})."}, None),
    "confirm_memory": ("memory", lambda m, k: {"memory_id": m, "evidence": "user"}, None),
    "dismiss": ("memory", lambda m, k: {"memory_id": m, "key_id": k}, None),
    "get_memories": (
        "memory",
        lambda m, k: {"ids": [m]},
        lambda m, k, reply: shows(m, reply["memories"]),
    ),
    "memory_keys": (
        "graph",
        lambda m, k: {"memory_ids": [m]},
        lambda m, k, reply: bool(reply["memories"][m]),
    ),
}


@pytest.mark.parametrize("scope", list(SCOPES))
@pytest.mark.parametrize("method", list(BY_ID))
def test_by_id_paths_reach_only_the_named_namespace(
    stack: FullStack, method: str, scope: str
) -> None:
    service, body_for, shown = BY_ID[method]
    memory_id, key_id = probe(stack)
    before = state_of(stack, memory_id)
    body = scoped(body_for(memory_id, key_id), SCOPES[scope])
    try:
        reply = stack.client.call(service, method, body)
    except NotFound:
        reached = False
    else:
        reached = True if shown is None else shown(memory_id, key_id, reply)
    assert reached == (scope == "named"), f"{method} with namespace {scope}"
    if scope != "named":
        assert state_of(stack, memory_id) == before, f"{method} changed another namespace"


@pytest.fixture(scope="module")
def beacon(stack: FullStack) -> str:
    """One distinctive memory of ``alpha`` that every recall path ranks first there."""
    return stack.remember(
        "The lighthouse keeper of Varnholm feeds a ginger cat called Biscuit.",
        ["Varnholm lighthouse", "Biscuit", "ginger cat"],
        namespace=HOME,
    )


@pytest.mark.parametrize("scope", list(SCOPES))
def test_recall_paths_show_only_the_named_namespace(
    stack: FullStack, beacon: str, scope: str
) -> None:
    memory_id = beacon
    namespace = SCOPES[scope]
    replies = [
        stack.memory(
            "search", scoped({"query": QUERY, "hops": 5, "min_seq": stack.last_seq}, namespace)
        ),
        stack.memory("recall", scoped({"query": QUERY}, namespace)),
        stack.memory("inject", {"prompt": QUERY, "namespaces": [namespace or "default"]}),
        stack.memory("brief", scoped({}, namespace)),
        stack.memory("browse_keys", scoped({}, namespace)),
    ]
    search, recall, inject, _, browse = replies
    if scope == "named":
        assert shows(memory_id, search) and shows(memory_id, recall), (search, recall)
        assert browse["key_count"] > 0
    else:
        assert not any(shows(memory_id, reply) for reply in replies)
        assert not any(m["namespace"] == HOME for m in inject["memories"])
        assert browse["key_count"] == 0


def mcp_call(stack: FullStack, tool: str, arguments: dict[str, Any]) -> tuple[bool, str]:
    """One tool call through the real MCP server: (is_error, text)."""
    backend = MemoryBackend(stack.stack.endpoints.frontend, Path("/km/logs"))
    server = build_server(backend, counts=None, provenance=Provenance("iso"), hook=False)

    async def run() -> tuple[bool, str]:
        async with Client(server) as client:
            result = await client.call_tool(tool, arguments)
            return bool(result.is_error), getattr(result.content[0], "text", "")

    return asyncio.run(run())


@pytest.mark.parametrize("tool", ["history", "correct", "forget"])
def test_mcp_tools_by_id_default_to_default_and_take_a_namespace(
    stack: FullStack, tool: str
) -> None:
    memory_id, _ = probe(stack)
    arguments: dict[str, Any] = {"memory_id": memory_id}
    if tool == "correct":
        arguments["content"] = "The orchard was replanted with pears."
    before = state_of(stack, memory_id)
    failed, text = mcp_call(stack, tool, arguments)
    assert failed and "not_found: memory" in text, text
    assert state_of(stack, memory_id) == before
    failed, text = mcp_call(stack, tool, {**arguments, "namespace": " Alpha "})
    assert not failed, text
