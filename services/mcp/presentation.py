"""What an LLM reads of a tool result: compact JSON text and argument errors in plain words.

The SDK sends a structured result twice — ``structuredContent`` and, for clients that pass
only text to the model, the same JSON indented by two spaces — and words a bad argument as
pydantic's report, a link to errors.pydantic.dev on every line. ``KeymemServer`` keeps the
SDK's tool handling and changes those two things only: the text is the structured content as
compact JSON (the same facts, about a third fewer characters), and an argument error lists
each field with what is wrong with it.

``self_contained`` writes a tool's output schema without ``$defs``: the SDK's client checks every
result against it with ``jsonschema``, which resolves each ``$ref`` and tries each ``anyOf`` arm
per value, more of its CPU per ``remember`` than the reply's parsing.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult, InputRequiredResult, TextContent
from pydantic import ValidationError


def compact_json(value: Any) -> str:
    """``value`` as JSON without indentation or escaped non-ASCII text."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


NULL = {"type": "null"}
VALUE_KEYWORDS = {"enum", "const"}  # an arm with these would refuse null after the merge


def self_contained(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every ``$ref`` replaced by its definition and each nullable
    ``anyOf: [{type: T, ...}, {type: null}]`` (no ``enum``/``const`` in the arm) written as
    ``{type: [T, null], ...}``: the same documents validate, without a reference to resolve
    or an arm to try."""
    definitions = schema.get("$defs", {})

    def expand(node: Any, within: frozenset[str]) -> Any:
        if isinstance(node, list):
            return [expand(item, within) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            name = ref.removeprefix("#/$defs/")
            if name in within or name not in definitions:
                raise ValueError(f"cannot inline {ref}: recursive or not in $defs")
            siblings = {key: value for key, value in node.items() if key != "$ref"}
            return {**expand(definitions[name], within | {name}), **siblings}
        flat = {key: expand(value, within) for key, value in node.items() if key != "$defs"}
        arms = flat.get("anyOf")
        if isinstance(arms, list) and len(arms) == 2 and NULL in arms:
            other = arms[1 - arms.index(NULL)]
            if isinstance(other.get("type"), str) and not VALUE_KEYWORDS & other.keys():
                rest = {key: value for key, value in flat.items() if key != "anyOf"}
                return {**other, **rest, "type": [other["type"], "null"]}
        return flat

    result: dict[str, Any] = expand(schema, frozenset())
    return result


def argument_errors(error: ValidationError) -> str:
    """One line per wrong argument: where it is and what is wrong (no values, no links)."""
    problems = [
        f"{'.'.join(str(part) for part in detail['loc']) or 'arguments'}: {detail['msg']}"
        for detail in error.errors(include_url=False, include_input=False, include_context=False)
    ]
    return "invalid arguments: " + "; ".join(problems)


class KeymemServer(MCPServer[None]):
    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[None, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            result = await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            raise ToolError(f"Error executing tool {name}: {argument_errors(cause)}") from cause
        if not isinstance(result, CallToolResult) or result.structured_content is None:
            return result
        text = TextContent(type="text", text=compact_json(result.structured_content))
        return result.model_copy(update={"content": [text]})
