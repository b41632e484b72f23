"""keymem's MCP tools in process: the SDK's client against the real server over every real service.

The services run as threads (tests/full_stack.py); the MCP server is the one ``keymem mcp``
builds, reached through the SDK's in-process ``Client``. These check the tool logic — shapes,
provenance, error translation, the prompt — quickly; tests/test_mcp_stdio.py runs the same
server as a real subprocess over stdio against supervised services.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
from mcp import Client
from mcp_types import CallToolResult, RequestParamsMeta

from keymem.services.config import load
from keymem.services.mcp.backend import MemoryBackend
from keymem.services.mcp.presentation import self_contained
from keymem.services.mcp.prompt import RULES, memory_system_prompt
from keymem.services.mcp.provenance import Provenance
from keymem.services.mcp.server import build_server
from keymem.services.mcp.startup import Startup, StartupFailed
from tests.full_stack import FullStack, full_stack

TOOLS = {
    "recall",
    "browse_keys",
    "read_key",
    "read_memory",
    "confirm_memory",
    "remember",
    "correct",
    "dismiss",
    "forget",
    "remember_batch",
    "history",
}
SKILL = Path(__file__).parent.parent / "hooks" / "claude-code" / "skills" / "keymem" / "SKILL.md"
T = TypeVar("T")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FullStack]:
    with full_stack(tmp_path_factory.mktemp("mcp")) as running:
        yield running


def session(
    stack: FullStack,
    work: Callable[[Client], Awaitable[T]],
    *,
    provenance: Provenance | None = None,
    hook: bool = False,
    launch_error: str | None = None,
    endpoint: str | None = None,
) -> T:
    """Run ``work`` in one MCP session with a freshly built server."""
    backend = MemoryBackend(
        endpoint or stack.stack.endpoints.frontend,
        Path("/km/logs"),
        startup=None if launch_error is None else Startup(failing(launch_error)),
    )
    counts = None if launch_error else stack.memory("counts", {})
    server = build_server(
        backend,
        counts=counts,
        provenance=provenance or Provenance("test-session"),
        hook=hook,
    )

    async def run() -> T:
        async with Client(server) as client:
            return await work(client)

    return asyncio.run(run())


def failing(message: str) -> Callable[[], None]:
    """A start-up that fails with ``message``."""

    def launch() -> None:
        raise StartupFailed(message)

    return launch


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    structured: dict[str, Any] | None = result.structured_content
    assert structured is not None
    return structured


def error_text(result: CallToolResult) -> str:
    assert result.is_error
    text: str = getattr(result.content[0], "text", "")
    return text


def test_lists_the_tools_with_input_and_output_schemas(stack: FullStack) -> None:
    async def work(client: Client) -> Any:
        return (await client.list_tools()).tools

    tools = {tool.name: tool for tool in session(stack, work)}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description and tool.output_schema, tool.name
        assert tool.input_schema["type"] == "object"
    recall = tools["recall"].input_schema
    assert recall["required"] == ["query"]
    assert recall["properties"]["top_k"] | {"description": ""} == {
        "default": 8,
        "description": "",
        "maximum": 20,
        "minimum": 1,
        "title": "Top K",
        "type": "integer",
    }
    assert tools["read_key"].input_schema["properties"]["limit"]["maximum"] == 50
    assert tools["browse_keys"].input_schema["properties"]["limit"]["maximum"] == 100
    evidence = tools["confirm_memory"].input_schema["properties"]["evidence"]
    assert evidence["enum"] == ["user", "authoritative_source", "observation"]
    assert set(tools["remember"].input_schema["required"]) == {"content", "keys"}
    assert tools["remember"].input_schema["properties"]["keys"]["maxItems"] == 32
    assert "status" in tools["recall"].output_schema["properties"]
    assert tools["recall"].annotations is not None and tools["recall"].annotations.read_only_hint
    assert tools["forget"].annotations is not None and tools["forget"].annotations.destructive_hint


def test_key_walk_and_every_write_through_the_tools(stack: FullStack) -> None:
    async def work(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {}
        newton = ok(
            await client.call_tool(
                "remember",
                {
                    "content": "Newton discovered gravity when an apple fell",
                    "keys": ["Newton", "apple", "gravity"],
                    "namespace": "walk",
                    "key_types": {"Newton": "name"},
                },
            )
        )
        batch = ok(
            await client.call_tool(
                "remember_batch",
                {
                    "items": [
                        {
                            "content": "apples are a fruit",
                            "keys": ["apple", "fruit", "orchard"],  # three: no auto-keys
                            "namespace": "walk",
                        },
                        {
                            "content": "the user likes strawberries",
                            "keys": ["strawberry", "fruit", "딸기"],
                            "decay_profile": "stable",
                            "namespace": "walk",
                        },
                    ]
                },
            )
        )
        out["batch"] = batch
        out["recall"] = ok(
            await client.call_tool("recall", {"query": "Newton", "namespace": "walk"})
        )
        out["miss"] = ok(
            await client.call_tool(
                "recall", {"query": "quantum chromodynamics", "namespace": "walk", "explain": True}
            )
        )
        preview = out["recall"]["memories"][0]
        apple = next(k for k in preview["connected_keys"] if k["concept"] == "apple")
        out["read_key"] = ok(
            await client.call_tool(
                "read_key", {"key_id": apple["key_id"], "query": "gravity", "namespace": "walk"}
            )
        )
        out["read_memory"] = ok(
            await client.call_tool(
                "read_memory",
                {"memory_id": newton["saved"], "via_key_id": apple["key_id"], "namespace": "walk"},
            )
        )
        out["browse"] = ok(await client.call_tool("browse_keys", {"namespace": "walk"}))
        out["confirm"] = ok(
            await client.call_tool(
                "confirm_memory",
                {"memory_id": newton["saved"], "evidence": "user", "namespace": "walk"},
            )
        )
        fruit_id = batch["saved"][0]
        out["correct"] = ok(
            await client.call_tool(
                "correct",
                {"memory_id": fruit_id, "content": "apples are a red fruit", "namespace": "walk"},
            )
        )
        out["history"] = ok(
            await client.call_tool(
                "history", {"memory_id": out["correct"]["new_id"], "namespace": "walk"}
            )
        )
        out["dismiss"] = ok(
            await client.call_tool(
                "dismiss",
                {"memory_id": newton["saved"], "key_id": apple["key_id"], "namespace": "walk"},
            )
        )
        out["forget"] = ok(
            await client.call_tool("forget", {"memory_id": newton["saved"], "namespace": "walk"})
        )
        out["gone"] = error_text(
            await client.call_tool(
                "read_memory", {"memory_id": newton["saved"], "namespace": "walk"}
            )
        )
        out["newton"] = newton["saved"]
        return out

    out = session(stack, work)
    recall = out["recall"]
    assert recall["status"] == "found" and recall["keys"][0]["concept"] == "Newton"
    preview = recall["memories"][0]
    assert preview["content"] == "Newton discovered gravity when an apple fell"
    assert preview["evidence"] == "passive_preview" and preview["reinforced"] is False
    assert preview["validity"]["status"] == "fresh"
    miss = out["miss"]
    assert miss["status"] == "no_match" and miss["nearest_keys"] and miss["note"]
    assert miss["explain"]["namespaces"]["walk"]["memories"] == 3
    handles = out["read_key"]["memories"]
    assert out["read_key"]["key"]["concept"] == "apple" and out["read_key"]["total"] == 2
    assert {h["evidence"] for h in handles} == {"unread"}
    assert handles[0]["memory_id"] == out["newton"]  # ranked by the query "gravity"
    memory = out["read_memory"]["memory"]
    assert out["read_memory"]["evidence"] == "read" and memory["access_count"] == 1
    traversed = [k for k in memory["keys"] if k["traversed_from"]]
    assert [k["concept"] for k in traversed] == ["apple"] and traversed[0]["link_weight"] == 1.1
    assert out["browse"]["key_count"] == 7 and out["browse"]["keys"][0]["memory_count"] == 2
    assert out["confirm"]["confirmed"] and out["confirm"]["depth"] == pytest.approx(0.05)
    assert len(out["batch"]["saved"]) == 2 and out["batch"]["batch_id"]
    assert out["correct"]["superseded"] == out["batch"]["saved"][0]
    versions = out["history"]["versions"]
    assert [v["content"] for v in versions] == ["apples are a fruit", "apples are a red fruit"]
    assert out["history"]["current"] == out["correct"]["new_id"]
    assert out["dismiss"]["previous_link_weight"] == 1.1 and out["dismiss"]["link_weight"] == 0.8
    assert out["forget"]["deleted"] == [out["newton"]]
    assert out["gone"].endswith(f"not_found: memory {out['newton']} not found")


def test_saved_memories_carry_the_host_session_unless_gated_off(
    stack: FullStack, tmp_path: Path
) -> None:
    def host(env: dict[str, str]) -> Provenance:
        return Provenance.from_config(load(env, home=tmp_path))

    def saved_source(provenance: Provenance, source: dict[str, Any] | None) -> Any:
        async def work(client: Client) -> Any:
            body: dict[str, Any] = {"content": f"provenance {provenance}", "keys": ["provenance"]}
            if source is not None:
                body["source"] = source
            saved = ok(await client.call_tool("remember", body))
            read = ok(await client.call_tool("read_memory", {"memory_id": saved["saved"]}))
            return read["memory"]["source"]

        return session(stack, work, provenance=provenance)

    claude = host({"CLAUDE_CODE_SESSION_ID": "cc-42"})
    source = saved_source(claude, {"host_turn": "7", "host_session": "forged"})
    assert source["host_agent"] == "claude-code" and source["host_session"] == "cc-42"
    assert source["host_turn"] == "7" and source["tool"] == "remember"
    assert source["session"] == claude.session and source["saved_at"].startswith("20")

    codex = host({"CODEX_THREAD_ID": "th-9"})
    assert saved_source(codex, None)["host_agent"] == "codex"

    gated = host({"CLAUDE_CODE_SESSION_ID": "cc-42", "KEYMEM_TRANSCRIPT_ACCESS": "false"})
    source = saved_source(gated, {"host_session": "forged"})
    assert "host_session" not in source and "host_agent" not in source
    assert source["session"] == gated.session
    # No host id and an opt-in: we never guess a session from transcript files.
    plain = host({"KEYMEM_TRANSCRIPT_ACCESS": "true"})
    assert plain.host_session is None


def test_bad_arguments_and_keymem_errors_are_tool_errors(stack: FullStack) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("recall", {"query": ""}),
        ("recall", {"query": "x", "top_k": 21}),
        ("remember", {"content": "no keys", "keys": []}),
        # nothing usable and nothing to extract from the text (auto-keys find no key in it)
        ("remember", {"content": "a b c", "keys": ["a"]}),
        ("confirm_memory", {"memory_id": "abc", "evidence": "a hunch"}),
        ("read_key", {"key_id": "nope"}),
        ("read_memory", {}),
        ("remember", {"content": "x" * 20_001, "keys": ["long"]}),
    ]

    async def work(client: Client) -> list[str]:
        return [error_text(await client.call_tool(name, args)) for name, args in calls]

    texts = session(stack, work)
    assert "String should have at least 1 character" in texts[0]
    assert "less than or equal to 20" in texts[1]
    assert "keys" in texts[2] and "at least 1 item" in texts[2]
    assert "bad_request: no usable key" in texts[3]
    assert "'user', 'authoritative_source' or 'observation'" in texts[4]
    assert "not_found" in texts[5]
    assert "memory_id" in texts[6] and "Field required" in texts[6]
    assert "at most 20000 characters" in texts[7]


def test_services_down_every_tool_names_the_log(stack: FullStack) -> None:
    failure = "router did not become ready; its log: /km/logs/router.log"

    async def work(client: Client) -> tuple[str | None, list[str]]:
        texts = [
            error_text(await client.call_tool("recall", {"query": "anything"})),
            error_text(await client.call_tool("remember", {"content": "c", "keys": ["kk"]})),
            error_text(await client.call_tool("forget", {"memory_id": "abc"})),
        ]
        return client.instructions, texts

    instructions, texts = session(
        stack, work, launch_error=failure, endpoint="ipc:///tmp/km-nothing-listens-here.sock"
    )
    assert instructions is not None and "starting in the background" in instructions
    for text in texts:
        assert "unavailable: keymem could not be started" in text and "router.log" in text


def test_instructions_carry_live_counts_and_the_prompt_follows_the_hook(
    stack: FullStack,
) -> None:
    stack.memory("remember", {"content": "counted memory", "keys": ["counted"]})
    counts = stack.memory("counts", {})

    async def work(client: Client) -> tuple[str | None, str, list[str]]:
        prompts = [p.name for p in (await client.list_prompts()).prompts]
        got = await client.get_prompt("memory_system_prompt")
        return client.instructions, getattr(got.messages[0].content, "text", ""), prompts

    instructions, prompt, prompts = session(stack, work, hook=False)
    assert prompts == ["memory_system_prompt"]
    assert instructions is not None
    assert (
        f"{counts['memories']} memories under {counts['keys']} keys ({counts['links']} links)"
        in instructions
    )
    assert "call `recall` silently 3 times" in prompt and "<keymem-surfaced>" not in prompt
    _, hooked, _ = session(stack, work, hook=True)
    assert "<keymem-surfaced>" in hooked and "3 times" not in hooked


def test_the_claude_code_skill_carries_the_same_protocol() -> None:
    skill = " ".join(SKILL.read_text().split())
    for rule in [*RULES, memory_system_prompt(hook=True).splitlines()[1]]:
        assert " ".join(rule.split()) in skill, rule


def described(schema: dict[str, Any]) -> dict[str, bool]:
    """Every parameter of an input schema (and of the models it refers to): described?"""
    found = {name: bool(p.get("description")) for name, p in schema["properties"].items()}
    for model, definition in schema.get("$defs", {}).items():
        for name, p in definition.get("properties", {}).items():
            found[f"{model}.{name}"] = bool(p.get("description"))
    return found


def test_what_an_llm_reads_of_the_tools_is_described_and_titled(stack: FullStack) -> None:
    async def work(client: Client) -> Any:
        return (await client.list_tools()).tools

    tools = session(stack, work)
    undescribed = [
        f"{tool.name}.{name}"
        for tool in tools
        for name, ok_ in described(tool.input_schema).items()
        if not ok_
    ]
    assert undescribed == []
    assert all(tool.title for tool in tools), [t.name for t in tools if not t.title]
    assert len({tool.title for tool in tools}) == len(tools)
    namespaces = [
        tool.input_schema["properties"]["namespace"]
        for tool in tools
        if "namespace" in tool.input_schema["properties"]
    ]
    assert len(namespaces) == len(tools) - 1  # all but remember_batch (per item)
    assert all(n == namespaces[0] for n in namespaces) and namespaces[0]["default"] is None


def test_argument_errors_read_as_plain_words(stack: FullStack) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("recall", {"query": "x", "top_k": 21}),
        ("browse_keys", {"limit": 0, "offset": -1}),
        ("remember_batch", {"items": [{"content": "c", "keys": []}]}),
        ("read_memory", {}),
    ]

    async def work(client: Client) -> list[str]:
        return [error_text(await client.call_tool(name, args)) for name, args in calls]

    texts = session(stack, work)
    for text in texts:
        assert "pydantic" not in text and "https://" not in text, text
        assert "invalid arguments: " in text
    assert "top_k: Input should be less than or equal to 20" in texts[0]
    assert "limit: " in texts[1] and "offset: " in texts[1]
    assert "items.0.keys: List should have at least 1 item" in texts[2]
    assert "memory_id: Field required" in texts[3]


def test_the_text_is_the_structured_result_compact(stack: FullStack) -> None:
    stack.memory(
        "remember",
        {
            "content": "Seoul is the capital of South Korea",
            "keys": ["Seoul", "서울", "capital"],
            "namespace": "compact",
        },
    )

    async def work(client: Client) -> CallToolResult:
        return await client.call_tool("recall", {"query": "서울", "namespace": "compact"})

    result = session(stack, work)
    assert result.structured_content is not None
    (text,) = result.content
    body = getattr(text, "text", "")
    assert json.loads(body) == result.structured_content
    assert "서울" in body and "\n" not in body  # non-ASCII as is, no indentation
    indented = json.dumps(result.structured_content, indent=2)
    assert len(body) < 0.8 * len(indented), (len(body), len(indented))


def test_a_batch_reply_gives_each_id_in_order_and_each_hint_once(stack: FullStack) -> None:
    """What an agent needs back from a batch: every item's id in order, which items replaced
    an exact copy, and what would make its keys better, a key's hint once however many items
    used that key (the per-item form repeated it for each, ~1 KB a memory)."""
    namespace = "batchreply"
    first = stack.memory(
        "remember",
        {
            "content": "strawberries are red",
            "keys": ["strawberry", "딸기", "red"],
            "namespace": namespace,
        },
    )["saved"]
    basket = "red fruit basket"  # a phrase key: its words are the better keys
    items = [
        {"content": f"the user bought fruit on day {day}", "keys": [basket, "market", "fruit"]}
        for day in range(20)
    ]
    items[7] = {"content": "strawberries are red", "keys": ["strawberry", "summer", "red"]}
    items[9] = {"content": "딸기는 빨갛다", "keys": ["딸기", "과일", "여름"]}  # Hangul only
    batch = [{**item, "namespace": namespace} for item in items]

    async def work(client: Client) -> tuple[CallToolResult, list[dict[str, Any]]]:
        result = await client.call_tool("remember_batch", {"items": batch})
        saved = ok(result)["saved"]
        read = [
            ok(await client.call_tool("read_memory", {"memory_id": i, "namespace": namespace}))
            for i in saved
        ]
        return result, read

    result, read = session(stack, work)
    reply = ok(result)
    assert [r["memory"]["content"] for r in read] == [i["content"] for i in items]
    assert len(set(reply["saved"])) == len(items)
    assert reply["duplicates"] == [{"item": 7, "superseded": first, "conflict": True}]
    hints = reply["hints"]
    assert hints["phrase_keys"] == {basket: ["red", "fruit", "basket"]}
    by_script = {hint["script"]: hint for hint in hints["single_language"]}
    assert by_script.keys() == {"latin", "hangul"}
    assert by_script["latin"]["items"] == [i for i in range(len(items)) if i != 9]
    assert by_script["hangul"]["items"] == [9]
    assert by_script["hangul"]["store_scripts"] == ["hangul", "latin"]
    (text,) = result.content
    body = getattr(text, "text", "")
    near = [(hint["your_key"], hint["key_id"]) for hint in hints["near_keys"]]
    assert near and len(set(near)) == len(near)
    assert body.count("add a key or two") == 2  # once a script, not once an item


def test_a_remember_reply_validates_against_a_schema_without_references(stack: FullStack) -> None:
    """The SDK's client checks each result against the listed output schema: written without
    ``$ref`` or ``anyOf`` (cheaper to check), it still accepts what remember sends, the id, the
    duplicate and the hints, and refuses a reply that breaks the models anywhere inside."""
    namespace = "schemareply"
    first = stack.memory(
        "remember",
        {"content": "cherries are red", "keys": ["cherry", "체리", "red"], "namespace": namespace},
    )["saved"]
    basket = "red fruit basket"

    async def work(client: Client) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
        schema = next(t for t in (await client.list_tools()).tools if t.name == "remember")
        assert schema.output_schema is not None
        new = await client.call_tool(
            "remember",
            {"content": "a basket of fruit", "keys": [basket, "fruit"], "namespace": namespace},
        )
        again = await client.call_tool(
            "remember",
            {"content": "cherries are red", "keys": ["cherry", "summer"], "namespace": namespace},
        )
        refused = []
        for broken in broken_replies(ok(new)):
            try:
                await client.session.validate_tool_result(
                    "remember", CallToolResult(content=[], structured_content=broken)
                )
            except RuntimeError as exc:
                refused.append(str(exc))
        return schema.output_schema, [ok(new), ok(again)], refused

    schema, (new, again), refused = session(stack, work)
    listed = json.dumps(schema)
    assert "$ref" not in listed and "$defs" not in listed and "anyOf" not in listed, listed
    assert re.fullmatch(r"[0-9a-f]{12}", new["saved"]) and new["superseded"] is None
    assert new["hints"]["phrase_keys"] == [{"your_key": basket, "split_into": basket.split()}]
    assert new["hints"]["single_language"]["script"] == "latin"
    assert (again["superseded"], again["deduplicated"], again["conflict"]) == (first, True, True)
    assert len(refused) == len(broken_replies(new)), refused
    assert all("Invalid structured content returned by tool remember" in e for e in refused)


def broken_replies(reply: dict[str, Any]) -> list[dict[str, Any]]:
    """``reply`` broken in one place each, from the top level to the hints' nested objects."""
    hints = reply["hints"]
    language = hints["single_language"]
    return [
        {**reply, "saved": None},
        {**reply, "superseded": 5},
        {**reply, "hints": {**hints, "phrase_keys": [{"your_key": "a b c", "split_into": "a"}]}},
        {**reply, "hints": {**hints, "near_keys": [{"your_key": "x"}]}},
        {**reply, "hints": {**hints, "single_language": {**language, "store_scripts": [1]}}},
        {**reply, "hints": "none"},
    ]


def test_one_memory_with_five_keys_is_one_recall_cluster(stack: FullStack) -> None:
    keys = ["violin", "daughter", "Sunday lesson", "music school", "바이올린"]
    saved = stack.memory(
        "remember",
        {
            "content": "the user's daughter takes violin lessons at the music school on Sundays",
            "keys": keys,
            "namespace": "cluster",
        },
    )["saved"]
    stack.memory(
        "remember",
        {"content": "the music school is closed in August", "keys": ["music school", "August"]},
    )

    async def work(client: Client) -> dict[str, Any]:
        return ok(
            await client.call_tool(
                "recall", {"query": "daughter violin lessons", "namespace": "cluster"}
            )
        )

    recalled = session(stack, work)
    assert recalled["memories"][0]["id"] == saved
    (cluster,) = recalled["keys"]  # not one cluster per key of the same memory
    assert {cluster["concept"], *(k["concept"] for k in cluster["merged_keys"])} == set(keys)


def test_read_memory_reaches_another_namespace_only_when_named(stack: FullStack) -> None:
    saved = stack.memory(
        "remember",
        {"content": "the other namespace's fact", "keys": ["elsewhere"], "namespace": "ns-b"},
    )["saved"]

    async def work(client: Client) -> tuple[str, dict[str, Any]]:
        missing = error_text(await client.call_tool("read_memory", {"memory_id": saved}))
        named = ok(
            await client.call_tool("read_memory", {"memory_id": saved, "namespace": "NS-B "})
        )
        return missing, named

    missing, named = session(stack, work)
    assert f"not_found: memory {saved} not found" in missing
    assert named["memory"]["content"] == "the other namespace's fact"
    assert named["memory"]["namespace"] == "ns-b"


def test_codex_turn_id_becomes_host_turn(stack: FullStack) -> None:
    codex = Provenance("codex-test", "codex", "thread-1")

    def turn(turn_id: str) -> RequestParamsMeta:
        meta = {"x-codex-turn-metadata": {"session_id": "thread-1", "turn_id": turn_id}}
        return cast(RequestParamsMeta, meta)  # an open map: hosts add their own keys

    async def work(client: Client) -> list[dict[str, Any]]:
        saved = ok(
            await client.call_tool(
                "remember",
                {
                    "content": "codex turn fact",
                    "keys": ["codex turn"],
                    "source": {"host_turn": "x"},
                },
                meta=turn("t-7"),
            )
        )["saved"]
        source = ok(await client.call_tool("read_memory", {"memory_id": saved}))["memory"]
        confirms = [
            ok(
                await client.call_tool(
                    "confirm_memory", {"memory_id": saved, "evidence": "user"}, meta=turn(t)
                )
            )
            for t in ("t-8", "t-8", "t-9")
        ]
        return [source["source"], *confirms]

    source, first, again, later = session(stack, work, provenance=codex)
    assert (source["host_agent"], source["host_session"]) == ("codex", "thread-1")
    assert source["host_turn"] == "t-7"  # the host's word, not the agent's "x"
    assert [first["duplicate"], again["duplicate"], later["duplicate"]] == [False, True, False]


def test_a_tool_waits_for_the_start_up_within_its_deadline(stack: FullStack) -> None:
    """The handshake does not wait for the services; a tool call does, up to its deadline."""
    release = threading.Event()

    def services_come_up() -> None:
        release.wait(60)

    startup = Startup(services_come_up)
    backend = MemoryBackend(
        stack.stack.endpoints.frontend, Path("/km/logs"), startup=startup, timeout_ms=500
    )
    server = build_server(backend, counts=None, provenance=Provenance("t"), hook=False)

    async def work() -> tuple[str | None, int, str, dict[str, Any]]:
        async with Client(server) as client:
            tools = (await client.list_tools()).tools
            waiting = error_text(await client.call_tool("recall", {"query": "anything"}))
            release.set()  # the services are up now
            later = ok(await client.call_tool("recall", {"query": "anything"}))
            return client.instructions, len(tools), waiting, later

    instructions, tools, waiting, later = asyncio.run(work())
    assert instructions is not None and "starting in the background" in instructions
    assert tools == len(TOOLS)
    assert "unavailable: keymem's services are still starting" in waiting
    assert "waited its 0.5 s deadline" in waiting and "/km/logs" in waiting
    assert later["status"] in ("found", "no_match")


def test_the_skill_lists_every_tool() -> None:
    table = re.findall(r"^\| `(.+?)` \|", SKILL.read_text(), re.M)
    listed = {name for row in table for name in re.findall(r"(\w+)\(", row)}
    assert listed == TOOLS


def test_a_nullable_choice_keeps_null_when_its_schema_is_flattened() -> None:
    """An ``enum`` arm merged with ``type: [string, null]`` would refuse null: it stays a
    choice of two arms."""
    choice = {"anyOf": [{"enum": ["a", "b"], "type": "string"}, {"type": "null"}]}
    flat = self_contained({"properties": {"pick": choice}, "type": "object"})
    assert flat["properties"]["pick"] == choice
    assert self_contained({"anyOf": [{"type": "string"}, {"type": "null"}]}) == {
        "type": ["string", "null"]
    }
