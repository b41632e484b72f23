"""Key resolution on write: reuse, merge into, or create the key a memory is filed under.

Order (the original's): an exact concept/alias match of any type wins (a name request promotes
a concept twin in place); name/proper_noun keys are never merged by similarity; a concept key
folds into the closest existing concept key of its namespace when the cosine clears the merge
threshold (the short-key threshold for short keys, never between siblings such as "Agent A" /
"Agent B", "Room 101" / "Room 102" or "v0.6.1" / "v0.6.2": graph/siblings.py), keeping
the new surface as an alias; otherwise a new key is created.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from keymem.services.graph.profile import Thresholds
from keymem.services.graph.requests import KeyInput
from keymem.services.graph.siblings import siblings
from keymem.services.graph.state import GraphState
from keymem.services.graph.text import (
    is_short_concept,
    key_words,
    script_of,
    usable_key,
)
from keymem.store.records import KeyAlias, KeyRecord

HINT_DIGITS = 3
PHRASE_KEY_MIN_WORDS = 3
# Words a phrase key's split leaves out: they would be keys about nothing.
PHRASE_FILLER = frozenset(
    {"a", "an", "the", "of", "and", "or", "to", "in", "on", "at", "for", "with", "from", "by"}
)


@dataclass(frozen=True, slots=True)
class Resolution:
    key_id: str
    surface: str
    created: bool
    # the closest concept key of the namespace when the key was created (for hints)
    nearest: tuple[str, float] | None = None


def resolve_key(
    state: GraphState, namespace: str, wanted: KeyInput, thresholds: Thresholds, now: float
) -> Resolution:
    index = state.index_for(namespace, len(wanted.vector))
    existing_id = index.exact.get(wanted.surface.lower())
    if existing_id is not None:
        existing = state.keys[existing_id]
        if wanted.key_type != "concept" and existing.key_type == "concept":
            state.set_key_type(existing, wanted.key_type)
        return Resolution(existing_id, wanted.surface, created=False)
    best = index.best_concept(wanted.vector)
    if wanted.key_type == "concept" and best is not None:
        threshold = (
            thresholds.short_key_merge if is_short_concept(wanted.surface) else thresholds.key_merge
        )
        target = state.keys[best[0]]
        if threshold > 0 and best[1] >= threshold and not siblings(wanted.surface, target.concept):
            state.add_alias(target, KeyAlias(wanted.surface, learned=False, added_at=now))
            return Resolution(target.id, wanted.surface, created=False)
    key = KeyRecord(
        id=state.new_id(),
        namespace=namespace,
        concept=wanted.surface,
        key_type=wanted.key_type,
        created_at=now,
        vector=wanted.vector.copy(),
    )
    state.add_key(key)
    return Resolution(key.id, wanted.surface, created=True, nearest=best)


def near_key_hints(
    state: GraphState, resolutions: list[Resolution], thresholds: Thresholds
) -> list[dict[str, Any]]:
    """Existing concept keys close to (but not merged with) a key the caller just coined."""
    own = {r.key_id for r in resolutions}
    hints: list[dict[str, Any]] = []
    for resolution in resolutions:
        if not resolution.created or resolution.nearest is None:
            continue
        nearest_id, similarity = resolution.nearest
        if nearest_id in own or nearest_id not in state.keys:
            continue
        merge = (
            thresholds.short_key_merge
            if is_short_concept(resolution.surface)
            else thresholds.key_merge
        )
        if thresholds.key_recall <= similarity < merge:
            hints.append(
                {
                    "your_key": resolution.surface,
                    "existing_concept": state.keys[nearest_id].concept,
                    "key_id": nearest_id,
                    "similarity": round(similarity, HINT_DIGITS),
                }
            )
    return hints


def phrase_key_hints(keys: list[KeyInput]) -> list[dict[str, Any]]:
    """Agent keys of ``PHRASE_KEY_MIN_WORDS`` or more words: a phrase is matched only when a
    query repeats it, while its words as separate keys each meet other memories and queries."""
    hints = []
    for key in keys:
        words = key_words(key.surface)
        if not key.auto and len(words) >= PHRASE_KEY_MIN_WORDS:
            split = [w for w in words if usable_key(w) and w.lower() not in PHRASE_FILLER]
            hints.append({"your_key": key.surface, "split_into": list(dict.fromkeys(split))})
    return hints


def single_language_hint(
    state: GraphState, namespace: str, keys: list[KeyInput]
) -> dict[str, Any] | None:
    """When every agent key is in one writing system while the namespace already holds keys
    in others: a memory keyed in one language is found only by queries in that language
    (keys carry the vectors; across scripts literal matching never fires)."""
    scripts = {script_of(k.surface) for k in keys if not k.auto} - {None}
    index = state.indexes.get(namespace)
    if len(scripts) != 1 or index is None:
        return None
    (script,) = scripts
    others = sorted(s for s, n in index.scripts.items() if n > 0 and s not in (script, None))
    if not others:
        return None
    return {
        "script": script,
        "store_scripts": sorted([script, *others]),
        "note": f"every key is {script} while this namespace also has {', '.join(others)} "
        "keys: add a key or two in those languages so queries in them find this memory",
    }
