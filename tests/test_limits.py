"""One set of limits (protocol/limits.py): what one layer accepts, no other layer refuses.

The MCP tool schemas state the shared limits; a namespace at the limit works in the memory
service's search, the graph and the lexicon, and one character more is refused by each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from keymem.protocol import limits
from keymem.protocol.errors import KeymemError
from keymem.services import graph
from keymem.services.lexicon.service import Lexicon, make_service
from keymem.services.lexicon.tokenizer import shared_tokenizer
from keymem.services.mcp.backend import MemoryBackend
from keymem.services.mcp.provenance import Provenance
from keymem.services.mcp.server import build_server
from keymem.services.memory.search import SearchRequest
from keymem.services.stack import InprocStack

# Tool argument -> the limit its schema must state.
SCHEMA_LIMITS = {
    "namespace": limits.NAMESPACE_MAX_CHARS,
    "content": limits.CONTENT_MAX_CHARS,
    "memory_id": limits.ID_MAX_CHARS,
    "key_id": limits.ID_MAX_CHARS,
    "query": limits.PROMPT_MAX_CHARS,
}


def tool_schemas(tmp_path: Path) -> dict[str, dict[str, Any]]:
    backend = MemoryBackend("inproc://keymem-nowhere", tmp_path)  # never called: schemas only
    server = build_server(backend, counts=None, provenance=Provenance("limits"), hook=False)

    async def listed() -> dict[str, dict[str, Any]]:
        async with Client(server) as client:
            return {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}

    return asyncio.run(listed())


def stated_limits(schema: Any, argument: str) -> list[int | None]:
    """maxLength of every string schema given for ``argument``, anywhere in ``schema``."""
    found: list[int | None] = []
    if isinstance(schema, dict):
        for name, value in schema.get("properties", {}).items():
            if name == argument:
                found.extend(_string_limits(value))
        for value in schema.values():
            found.extend(stated_limits(value, argument))
    elif isinstance(schema, list):
        for value in schema:
            found.extend(stated_limits(value, argument))
    return found


def _string_limits(schema: dict[str, Any]) -> list[int | None]:
    options = schema.get("anyOf", [schema])
    return [o.get("maxLength") for o in options if o.get("type") == "string"]


def test_every_tool_schema_states_the_shared_limits(tmp_path: Path) -> None:
    schemas = tool_schemas(tmp_path)
    for argument, limit in SCHEMA_LIMITS.items():
        stated = [(tool, n) for tool, s in schemas.items() for n in stated_limits(s, argument)]
        assert stated, argument
        assert {n for _, n in stated} == {limit}, (argument, stated)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InprocStack]:
    home = tmp_path_factory.mktemp("limits")
    with InprocStack() as stack:
        settings = stack.settings(home)
        stack.add_worker(graph.build(settings))
        stack.add_worker(make_service(Lexicon(settings, shared_tokenizer())))
        yield stack


@pytest.mark.parametrize(
    ("length", "outcome"),
    [(limits.NAMESPACE_MAX_CHARS, "accepted"), (limits.NAMESPACE_MAX_CHARS + 1, "too_large")],
)
def test_a_namespace_is_accepted_or_refused_by_every_layer_alike(
    services: InprocStack, length: int, outcome: str
) -> None:
    namespace = "n" * length
    client = services.client()
    calls: dict[str, Callable[[], object]] = {
        "memory": lambda: SearchRequest.parse({"query": "apple", "namespace": namespace}),
        "graph": lambda: client.call("graph", "browse_keys", {"namespace": namespace}),
        "lexicon": lambda: client.call("lexicon", "search", {"query": "a", "namespace": namespace}),
    }
    outcomes = {}
    for layer, call in calls.items():
        try:
            call()
            outcomes[layer] = "accepted"
        except KeymemError as exc:
            outcomes[layer] = exc.code.value
    assert outcomes == dict.fromkeys(calls, outcome)
