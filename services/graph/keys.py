"""Key resolution on write: reuse, merge into, or create the key a memory is filed under.

Order (the original's): an exact concept/alias match of any type wins (a name request promotes
a concept twin in place); name/proper_noun keys are never merged by similarity; a concept key
folds into the closest existing concept key of its namespace when the cosine clears the merge
threshold (the short-key threshold for short keys, never across "Agent A"/"Agent B"), keeping
the new surface as an alias; otherwise a new key is created.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from keymem.services.graph.profile import Thresholds
from keymem.services.graph.requests import KeyInput
from keymem.services.graph.state import GraphState
from keymem.services.graph.text import conflicting_qualifier, is_short_concept
from keymem.store.records import KeyAlias, KeyRecord

HINT_DIGITS = 3


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
        if (
            threshold > 0
            and best[1] >= threshold
            and not conflicting_qualifier(wanted.surface, target.concept)
        ):
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
