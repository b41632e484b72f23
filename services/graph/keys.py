"""Key resolution on write: reuse, merge into, or create the key a memory is filed under.

Order (the original's): an exact concept/alias match of any type wins (a name request promotes
a concept twin in place); name/proper_noun keys are never merged by similarity; a concept key
folds into the closest existing concept key of its namespace when the cosine clears the merge
threshold (the short-key threshold for short keys, never across "Agent A"/"Agent B"), keeping
the new surface as an alias; otherwise a new key is created.
"""

from __future__ import annotations

from typing import Any

from services.graph.profile import Thresholds
from services.graph.requests import KeyInput
from services.graph.state import GraphState
from services.graph.text import conflicting_qualifier, is_short_concept
from store.records import KeyAlias, KeyRecord

HINT_DIGITS = 3


def resolve_key(
    state: GraphState, namespace: str, wanted: KeyInput, thresholds: Thresholds, now: float
) -> str:
    index = state.index_for(namespace, len(wanted.vector))
    existing_id = index.exact.get(wanted.surface.lower())
    if existing_id is not None:
        existing = state.keys[existing_id]
        if wanted.key_type != "concept" and existing.key_type == "concept":
            state.set_key_type(existing, wanted.key_type)
        return existing_id
    if wanted.key_type == "concept":
        threshold = (
            thresholds.short_key_merge if is_short_concept(wanted.surface) else thresholds.key_merge
        )
        best = index.best_concept(wanted.vector) if threshold > 0 else None
        if best is not None and best[1] >= threshold:
            target = state.keys[best[0]]
            if not conflicting_qualifier(wanted.surface, target.concept):
                state.add_alias(target, KeyAlias(wanted.surface, learned=False, added_at=now))
                return target.id
    key = KeyRecord(
        id=state.new_id(),
        namespace=namespace,
        concept=wanted.surface,
        key_type=wanted.key_type,
        created_at=now,
        vector=wanted.vector.copy(),
    )
    state.add_key(key)
    return key.id


def near_key_hints(
    state: GraphState,
    namespace: str,
    memory_id: str,
    provided: list[KeyInput],
    thresholds: Thresholds,
) -> list[dict[str, Any]]:
    """Existing concept keys close to (but not merged with) a key the caller just coined."""
    index = state.indexes.get(namespace)
    if index is None:
        return []
    own = set(state.mem_links.get(memory_id, {}))
    hints: list[dict[str, Any]] = []
    for wanted in provided:
        key_id = index.exact.get(wanted.surface.lower())
        if key_id is None or state.keys[key_id].concept.lower() != wanted.surface.lower():
            continue  # reused or merged: nothing was coined
        best = index.best_concept(wanted.vector, exclude=own)
        if best is None:
            continue
        merge = (
            thresholds.short_key_merge if is_short_concept(wanted.surface) else thresholds.key_merge
        )
        if thresholds.key_recall <= best[1] < merge:
            hints.append(
                {
                    "your_key": wanted.surface,
                    "existing_concept": state.keys[best[0]].concept,
                    "key_id": best[0],
                    "similarity": round(best[1], HINT_DIGITS),
                }
            )
    return hints
