"""Auto-keys for a memory saved without keys: candidates from its text, no LLM involved.

Auto-keys come from two places, both deterministic:

1. the namespace's existing keys whose concept or alias the text names literally — the graph
   adds these itself inside the write (``services/graph/writes.py``, ``link_keys``) for every
   memory with fewer than three agent keys, so they need no round trip, no vectors and no
   deadline;
2. for a memory with no keys at all, the lexicon's candidates (``lexicon.extract_keys``:
   nouns, proper nouns, multi-word names, structured tokens), most frequent first, which this
   module fetches before the write because new keys need vectors. Names and proper nouns are
   typed so, and so match only literally, never by similarity. Next to an agent's own keys
   these candidates were measured to add noise (docs/history/), so a memory with keys
   is not sent to the lexicon at all.

They are marked ``auto_keys``: the graph links them at half an agent key's weight. When the
lexicon cannot answer, a keyless write fails with ``unavailable`` instead of being stored
with fewer keys than the same text gets on an idle machine.
"""

from __future__ import annotations

from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError, Unavailable
from keymem.protocol.limits import DEFAULT_BUDGET_MS
from keymem.protocol.worker import remaining_ms
from keymem.services.graph.writes import AUTO_KEYS_MAX

EXTRACT_LIMIT = 12
KEY_TYPE_OF_KIND = {"name": "name", "proper": "proper_noun"}


def keyless(item: Any) -> bool:
    """An item with content and no usable key (a ``keys`` that is not a list of strings is
    left to the graph to name)."""
    if not isinstance(item, dict) or not isinstance(item.get("content"), str):
        return False
    keys = item.get("keys", [])
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        return False
    return not any(k.strip() for k in keys)


class AutoKeys:
    def __init__(self, client: Client) -> None:
        self.client = client

    def complete(self, items: list[Any]) -> list[Any]:
        """``items`` with the lexicon's candidates as keys where an item has none."""
        completed = self.complete_each(items)
        for item in completed:
            if isinstance(item, KeymemError):
                raise item
        return completed

    def complete_each(self, items: list[Any]) -> list[Any]:
        """``complete`` item by item: a keyless item whose keys could not be extracted becomes
        its own ``unavailable``, the others are completed."""
        wanting = [i for i, item in enumerate(items) if keyless(item)]
        if not wanting:
            return list(items)
        calls = [
            ("lexicon", "extract_keys", {"text": items[i]["content"], "limit": EXTRACT_LIMIT})
            for i in wanting
        ]
        outcomes = self.client.call_many(calls, timeout_ms=remaining_ms(DEFAULT_BUDGET_MS))
        completed = list(items)
        for i, extracted in zip(wanting, outcomes, strict=True):
            completed[i] = (
                Unavailable(f"no keys were given and none could be extracted: {extracted.message}")
                if isinstance(extracted, KeymemError)
                else with_candidates(items[i], extracted["keys"])
            )
        return completed


def with_candidates(item: dict[str, Any], candidates: list[dict[str, Any]]) -> dict[str, Any]:
    """``item`` keyed by its first ``AUTO_KEYS_MAX`` distinct candidates (unchanged without
    any: the graph then refuses it for having no usable key)."""
    seen: set[str] = set()
    keys: list[str] = []
    types: dict[str, str] = {}
    for candidate in candidates:
        surface = candidate["key"].strip()
        if not surface or surface.lower() in seen or len(keys) == AUTO_KEYS_MAX:
            continue
        seen.add(surface.lower())
        keys.append(surface)
        key_type = KEY_TYPE_OF_KIND.get(candidate["kind"])
        if key_type is not None:
            types[surface] = key_type
    if not keys:
        return item
    completed = {**item, "keys": keys, "auto_keys": keys}
    given_types = item.get("key_types")
    if types and (given_types is None or isinstance(given_types, dict)):
        completed["key_types"] = {**(given_types or {}), **types}
    return completed
