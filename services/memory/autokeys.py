"""Auto-keys: a memory saved with no keys, or with fewer than three, gets keys from its text.

No LLM is involved. Two sources, in this order:

1. keys the namespace already has whose concept or alias appears literally in the text
   (``graph.match_keys`` on the content, literal hits only) — these connect the new memory to
   the ones already there, which is what makes hops work;
2. for a memory with no keys at all, the lexicon's candidates (``lexicon.extract_keys``: nouns,
   proper nouns, multi-word names, structured tokens), most frequent first; names and proper
   nouns are typed so, and so match only literally, never by similarity. Next to an agent's
   own keys these candidates were measured to add noise (docs/BENCHMARKS.md), so a memory with
   one or two keys gets only the first source.

They are marked ``auto_keys``: the graph links them at half an agent key's weight. The agent's
own keys always come first and are never replaced.
"""

from __future__ import annotations

from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError, Unavailable
from keymem.protocol.worker import remaining_ms

MIN_AGENT_KEYS = 3
AUTO_KEYS_MAX = 5
EXTRACT_LIMIT = 12
LITERAL_MATCH_TOP_K = 10
DEFAULT_BUDGET_MS = 10_000
KEY_TYPE_OF_KIND = {"name": "name", "proper": "proper_noun"}


def agent_keys(item: dict[str, Any]) -> list[str] | None:
    """The item's usable agent keys, or None when its ``keys`` are not a list of strings (the
    graph will name that problem; nothing is added)."""
    keys = item.get("keys", [])
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        return None
    return [k for k in keys if k.strip()]


def needs_keys(item: Any) -> bool:
    if not isinstance(item, dict) or not isinstance(item.get("content"), str):
        return False
    keys = agent_keys(item)
    return keys is not None and len(keys) < MIN_AGENT_KEYS


class AutoKeys:
    def __init__(self, client: Client) -> None:
        self.client = client

    def complete(self, items: list[Any], namespace: Any = None) -> list[Any]:
        """``items`` with auto-keys added where an item has fewer than three keys."""
        wanting = [i for i, item in enumerate(items) if needs_keys(item)]
        if not wanting:
            return items
        calls: list[tuple[str, str, Any]] = []
        for i in wanting:
            content = items[i]["content"]
            calls.append(("lexicon", "extract_keys", {"text": content, "limit": EXTRACT_LIMIT}))
            match = {"text": content, "top_k": LITERAL_MATCH_TOP_K, "learn": False}
            scope = items[i].get("namespace", namespace)
            if isinstance(scope, str):
                match["namespace"] = scope
            calls.append(("graph", "match_keys", match))
        outcomes = self.client.call_many(calls, timeout_ms=remaining_ms(DEFAULT_BUDGET_MS))
        completed = list(items)
        for n, i in enumerate(wanting):
            extracted, literal = outcomes[2 * n], outcomes[2 * n + 1]
            completed[i] = self._with_auto_keys(items[i], extracted, literal)
        return completed

    @staticmethod
    def _with_auto_keys(item: dict[str, Any], extracted: Any, literal: Any) -> dict[str, Any]:
        own = agent_keys(item) or []
        seen = {k.strip().lower() for k in own}
        types: dict[str, str] = {}
        found: list[str] = []

        def offer(surface: str, key_type: str | None) -> None:
            clean = surface.strip()
            if clean and clean.lower() not in seen and len(found) < AUTO_KEYS_MAX:
                seen.add(clean.lower())
                found.append(clean)
                if key_type is not None:
                    types[clean] = key_type

        if not isinstance(literal, KeymemError):
            for key in literal["keys"]:
                if key.get("literal"):
                    offer(key["concept"], key.get("key_type"))
        if not own and not isinstance(extracted, KeymemError):
            # Only a keyless memory takes the lexicon's candidates: next to an agent's keys
            # they were measured to add noise (hotpot_per_query all@5 0.848 -> 0.768).
            for candidate in extracted["keys"]:
                offer(candidate["key"], KEY_TYPE_OF_KIND.get(candidate["kind"]))
        if not own and not found:
            failed = [o for o in (extracted, literal) if isinstance(o, KeymemError)]
            if failed:
                raise Unavailable(
                    f"no keys were given and none could be extracted: {failed[0].message}"
                )
            return item  # nothing key-like in the text: the graph says so
        completed = {**item, "keys": own + found, "auto_keys": found}
        given_types = item.get("key_types")
        extra_types = {k: v for k, v in types.items() if v != "concept"}
        if extra_types and (given_types is None or isinstance(given_types, dict)):
            completed["key_types"] = {**(given_types or {}), **extra_types}
        return completed
