"""Writes that create or end memories: remember, correct, forget, TTL expiry.

Versioning goes further than the original: a correction supersedes its predecessor, and the
whole chain is kept (nothing is pruned), so ``history`` can show every version. Exact
duplicates (same normalised text, same namespace, active) are superseded by the new save and
reported as ``deduplicated``; when the two share a key the save is also flagged ``conflict``.
"""

from __future__ import annotations

import contextlib
import heapq
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from keymem.protocol.errors import BadRequest, Conflict, NotFound
from keymem.protocol.fields import body_of
from keymem.services.graph.keys import (
    Resolution,
    near_key_hints,
    phrase_key_hints,
    resolve_key,
    single_language_hint,
)
from keymem.services.graph.profile import Thresholds
from keymem.services.graph.requests import (
    KeyInput,
    content_of,
    decay_profile_of,
    keys_of,
    namespace_of,
    related_of,
    req_str,
    source_of,
    ttl_of,
)
from keymem.services.graph.state import LINK_WEIGHT_DEFAULT, LINK_WEIGHT_MIN, GraphState
from keymem.services.graph.text import (
    ordered_phrases,
    text_names,
    usable_key,
)
from keymem.store.records import KeyRecord, MemoryRecord, to_json

INHERITED_LINK_PENALTY = 0.15
# A correction that moves its text this much further (in cosine) from an inherited key than
# the old text was drops the key. Key-to-sentence cosines of a fitting key are small on the
# offline model (0.05-0.5), so it is the move that tells, not the level.
KEY_DRIFT_MIN = 0.15
# A key keymem extracted from the content weighs half an agent's key: the agent chose its keys.
AUTO_LINK_WEIGHT = 0.5
# A memory filed under fewer agent keys than this gets auto-keys, at most this many.
MIN_AGENT_KEYS = 3
AUTO_KEYS_MAX = 5
DEEP_DEPTH_MIN = 0.7
SUPERSEDE_DEEP_FACTOR = 0.8
SUPERSEDE_SHALLOW_FACTOR = 0.3
DEFAULT_DECAY_PROFILE = "standard"


@dataclass(frozen=True, slots=True)
class RememberItem:
    content: str
    keys: list[KeyInput]
    namespace: str
    ttl_seconds: float | None
    decay_profile: str | None
    related_to: list[str] | None
    source: dict[str, Any] | None


def parse_remember(
    raw: Any, dim: int | None, *, by_text: Mapping[str, np.ndarray] | None = None
) -> RememberItem:
    """``by_text``: the vectors the request carries by key text (``requests.keys_of``)."""
    body = body_of(raw)
    keys = keys_of(body, dim, by_text=by_text)
    assert keys is not None
    return RememberItem(
        content=content_of(body),
        keys=keys,
        namespace=namespace_of(body),
        ttl_seconds=ttl_of(body),
        decay_profile=decay_profile_of(body),
        related_to=related_of(body),
        source=source_of(body),
    )


def check_related(state: GraphState, related: list[str] | None, namespace: str) -> None:
    for memory_id in related or ():
        memory = state.memories.get(memory_id)
        if memory is None or memory.namespace != namespace:
            raise NotFound(f"related_to memory {memory_id} not found in namespace {namespace!r}")


def _new_memory(
    state: GraphState,
    content: str,
    namespace: str,
    now: float,
    *,
    source: dict[str, Any] | None,
    expires_at: float | None,
    decay_profile: str,
    related_to: list[str],
    supersedes: str | None = None,
) -> MemoryRecord:
    memory = MemoryRecord(
        id=state.new_id(),
        namespace=namespace,
        content=content,
        created_at=now,
        source=to_json(source),
        supersedes=supersedes,
        last_accessed=now,
        expires_at=expires_at,
        last_confirmed_at=now,
        confirmation_count=1,
        decay_profile=decay_profile,
        last_confirmation_evidence="user",
        last_confirmation_source=to_json(source),
        related_to=tuple(r for r in related_to if r in state.memories),
    )
    state.add_memory(memory)
    return memory


def _supersede(state: GraphState, old: MemoryRecord, new: MemoryRecord) -> None:
    factor = SUPERSEDE_DEEP_FACTOR if old.depth >= DEEP_DEPTH_MIN else SUPERSEDE_SHALLOW_FACTOR
    old.depth *= factor
    state.deactivate(old)
    old.superseded_by = new.id
    state.touch_memory(old)
    state.index_content(new)  # the old version may have held the dedup entry for this text


def remember(
    state: GraphState, item: RememberItem, thresholds: Thresholds, now: float
) -> dict[str, Any]:
    duplicate = state.duplicate_of(item.namespace, item.content)
    if duplicate is not None and not duplicate.active(now):
        duplicate = None
    memory = _new_memory(
        state,
        item.content,
        item.namespace,
        now,
        source=item.source,
        expires_at=None if item.ttl_seconds is None else now + item.ttl_seconds,
        decay_profile=item.decay_profile or DEFAULT_DECAY_PROFILE,
        related_to=item.related_to or [],
        supersedes=duplicate.id if duplicate else None,
    )
    resolutions = link_keys(state, memory, item.keys, thresholds, now)
    result: dict[str, Any] = {"saved": memory.id}
    if duplicate is not None:
        shared = set(state.mem_links[duplicate.id]) & set(state.mem_links[memory.id])
        keep_duplicate_keys(state, duplicate, memory)
        _supersede(state, duplicate, memory)
        result["superseded"] = duplicate.id
        result["deduplicated"] = True
        if shared:
            result["conflict"] = True
            memory.contradicts = (*memory.contradicts, duplicate.id)
            state.changes.rewrite_flags(memory)
    hints = remember_hints(state, item, resolutions, thresholds)
    if hints:
        result["hints"] = hints
    return result


def remember_hints(
    state: GraphState, item: RememberItem, resolutions: list[Resolution], thresholds: Thresholds
) -> dict[str, Any]:
    """What would make the agent's keys better: new keys close to existing ones, phrase keys
    to split into words, keys all in one language in a store of several."""
    hints: dict[str, Any] = {}
    near = near_key_hints(state, resolutions, thresholds)
    if near:
        hints["near_keys"] = near
    phrases = phrase_key_hints(item.keys)
    if phrases:
        hints["phrase_keys"] = phrases
    language = single_language_hint(state, item.namespace, item.keys)
    if language is not None:
        hints["single_language"] = language
    return hints


@contextlib.contextmanager
def keys_looked_up(state: GraphState, items: list[RememberItem]) -> Iterator[None]:
    """Within, the keys ``items`` may coin (no key of their namespace has the text) have their
    nearest concept keys looked up already, in one call a namespace (``KeyIndex.look_ahead``):
    a batch of agent-written facts coins about a key a memory."""
    wanted: defaultdict[str, dict[bytes, np.ndarray]] = defaultdict(dict)
    for item in items:
        index = state.indexes.get(item.namespace)
        if index is None or not len(index):
            continue
        for key in item.keys:
            if len(key.vector) == index.dim and key.surface.lower() not in index.exact:
                wanted[item.namespace].setdefault(key.vector.tobytes(), key.vector)
    ahead = [state.indexes[namespace] for namespace in wanted]
    try:
        for index, vectors in zip(ahead, wanted.values(), strict=True):
            index.look_ahead(np.stack(list(vectors.values())))
        yield
    finally:
        for index in ahead:
            index.end_look_ahead()


def link_keys(
    state: GraphState,
    memory: MemoryRecord,
    keys: list[KeyInput],
    thresholds: Thresholds,
    now: float,
) -> list[Resolution]:
    """File ``memory`` under the agent's keys, then — when it has fewer than
    ``MIN_AGENT_KEYS`` of them — under auto-keys: the namespace's keys its text names
    literally (first named first), then the keys extracted from it, up to ``AUTO_KEYS_MAX``.

    The literal matching runs here, inside the write, so an acknowledged memory carries every
    auto-key it will ever get, whatever the load: the same text written in the same order
    gives the same links.
    """
    own = [k for k in keys if not k.auto]
    resolutions = [resolve_key(state, memory.namespace, k, thresholds, now) for k in own]
    for resolution in resolutions:
        state.add_link(resolution.key_id, memory.id, LINK_WEIGHT_DEFAULT)
    linked = state.mem_links[memory.id]
    added = 0
    named = named_keys(state, memory.namespace, memory.content) if len(own) < MIN_AGENT_KEYS else []
    for key_id in named:
        if added == AUTO_KEYS_MAX:
            break
        if key_id not in linked:
            state.add_link(key_id, memory.id, AUTO_LINK_WEIGHT, auto=True)
            added += 1
    index = state.index_for(memory.namespace)
    for key in keys:
        if added == AUTO_KEYS_MAX:
            break
        if not key.auto or index.exact.get(key.surface.lower()) in linked:
            continue
        resolution = resolve_key(state, memory.namespace, key, thresholds, now)
        if resolution.key_id not in linked:
            state.add_link(resolution.key_id, memory.id, AUTO_LINK_WEIGHT, auto=True)
            resolutions.append(resolution)
            added += 1
    return resolutions


def named_keys(state: GraphState, namespace: str, text: str) -> list[str]:
    """The namespace's keys with active memories whose concept or alias ``text`` names, in the
    order the text names them (literal, word-bounded, as in ``match_keys``)."""
    index = state.indexes.get(namespace)
    if index is None or not index.literal:
        return []
    found: dict[str, None] = {}
    for phrase in ordered_phrases(text):
        for key_id in sorted(index.literal.get(phrase, ())):
            if state.active_count.get(key_id, 0) > 0:
                found[key_id] = None
    return list(found)


def keep_duplicate_keys(state: GraphState, duplicate: MemoryRecord, memory: MemoryRecord) -> None:
    """An exact re-save keeps every key the older copy had (the union), at the older link's
    weight: saving "dog" again must not lose the [강아지, thunder] the first save was filed
    under."""
    for key_id, link in list(state.mem_links[duplicate.id].items()):
        state.add_link(key_id, memory.id, link.weight, auto=link.auto, learned=link.learned)


def head_of(state: GraphState, memory: MemoryRecord) -> MemoryRecord:
    while memory.superseded_by is not None and memory.superseded_by in state.memories:
        memory = state.memories[memory.superseded_by]
    return memory


def live_memory(state: GraphState, memory_id: str, namespace: str, now: float) -> MemoryRecord:
    """A memory that exists, has not expired and is in ``namespace``."""
    memory = state.memories.get(memory_id)
    if memory is None or memory.expired(now) or memory.namespace != namespace:
        raise NotFound(f"memory {memory_id} not found")
    return memory


@dataclass(frozen=True, slots=True)
class CorrectPlan:
    old: MemoryRecord
    content: str
    keys: list[KeyInput] | None
    ttl_seconds: float | None
    decay_profile: str | None
    related_to: list[str] | None
    source: dict[str, Any] | None
    notes: list[str]
    # rows: the old version's text, the new text (for judging which inherited keys still fit)
    text_vectors: np.ndarray | None = None


def plan_correct(state: GraphState, raw: Any, now: float) -> CorrectPlan:
    """Validate a correction completely before anything changes."""
    body = body_of(raw)
    memory_id = req_str(body, "memory_id")
    content = content_of(body)
    notes = []
    given = body.get("keys")
    if isinstance(given, list) and all(isinstance(k, str) and not usable_key(k) for k in given):
        notes.append(f"keys {given} are too short to be keys; the old version's keys were reused")
        body = {k: v for k, v in body.items() if k not in ("keys", "key_vectors")}
    keys = keys_of(body, state.dim, required=False)
    ttl = ttl_of(body)
    profile = decay_profile_of(body)
    related = related_of(body)
    source = source_of(body)
    vectors = text_vectors_of(body, state.dim) if keys is None else None
    old = live_memory(state, memory_id, namespace_of(body), now)
    if old.superseded_by is not None:
        head = head_of(state, old)
        if head.expired(now) or head.superseded_by is not None:
            raise Conflict(f"memory {memory_id} was superseded and has no live head")
        notes.insert(
            0, f"{memory_id} was already superseded; corrected its current version {head.id}"
        )
        old = head
    check_related(state, related, old.namespace)
    if old.id in (related or ()):
        raise BadRequest("a correction cannot be related_to the memory it replaces")
    return CorrectPlan(old, content, keys, ttl, profile, related, source, notes, vectors)


def text_vectors_of(body: dict[str, Any], dim: int | None) -> np.ndarray | None:
    """Optional ``text_vectors``: float32 [2, dim], the old and the new text, L2-normalised."""
    raw = body.get("text_vectors")
    if raw is None:
        return None
    if (
        not isinstance(raw, np.ndarray)
        or raw.ndim != 2
        or raw.shape[0] != 2
        or (dim is not None and raw.shape[1] != dim)
        or not np.all(np.isfinite(raw))
        or np.any(np.linalg.norm(raw, axis=1) == 0)
    ):
        raise BadRequest("text_vectors must be a finite float32 array of shape (2, dim)")
    unit: np.ndarray = (raw / np.linalg.norm(raw, axis=1)[:, None]).astype(np.float32)
    return unit


def still_fits(
    state: GraphState, key: KeyRecord, old_text: str, new_text: str, vectors: np.ndarray | None
) -> bool:
    """Whether an inherited key still fits a corrected text: it does when the new text names
    it; it does not when only the old text named it (the fact that named it is gone) or when
    the correction moved the text away from it by ``KEY_DRIFT_MIN`` in cosine (an off-topic
    tag left from the old text); otherwise — a broad category, a key in another language — it
    is kept."""
    surfaces = key.surfaces()
    if any(text_names(new_text, s) for s in surfaces):
        return True
    if any(text_names(old_text, s) for s in surfaces):
        return False
    if vectors is None:
        return True
    old_cosine, new_cosine = vectors @ state.key_vector(key)
    return bool(old_cosine - new_cosine < KEY_DRIFT_MIN)


def inherit_keys(
    state: GraphState, old: MemoryRecord, new: MemoryRecord, vectors: np.ndarray | None
) -> dict[str, Any]:
    """File ``new`` under the old version's keys that still fit its text (``still_fits``), each
    link a step weaker; says which were reused and which dropped. If none fits, all are reused:
    a memory needs a key, and the caller is told to give better ones."""
    links = list(state.mem_links[old.id].values())
    fitting = [
        link
        for link in links
        if still_fits(state, state.keys[link.key_id], old.content, new.content, vectors)
    ]
    report: dict[str, Any] = {}
    if not fitting:
        fitting = links
        report["note"] = "no key of the old version fits the new text; pass keys to replace them"
    for link in fitting:
        weight = max(LINK_WEIGHT_MIN, link.weight - INHERITED_LINK_PENALTY)
        state.add_link(link.key_id, new.id, weight, auto=link.auto, learned=link.learned)
    kept = {link.key_id for link in fitting}
    report["inherited_keys"] = [state.keys[link.key_id].concept for link in fitting]
    report["dropped_keys"] = [
        state.keys[link.key_id].concept for link in links if link.key_id not in kept
    ]
    return report


def correct(
    state: GraphState, plan: CorrectPlan, thresholds: Thresholds, now: float
) -> dict[str, Any]:
    old = plan.old
    new = _new_memory(
        state,
        plan.content,
        old.namespace,
        now,
        source=plan.source,
        expires_at=old.expires_at if plan.ttl_seconds is None else now + plan.ttl_seconds,
        decay_profile=plan.decay_profile or old.decay_profile,
        related_to=list(old.related_to) if plan.related_to is None else plan.related_to,
        supersedes=old.id,
    )
    result: dict[str, Any] = {"new_id": new.id, "superseded": old.id}
    notes = list(plan.notes)
    if plan.keys is None:
        inherited = inherit_keys(state, old, new, plan.text_vectors)
        if "note" in inherited:
            notes.append(inherited.pop("note"))
        result.update(inherited)
    else:
        for wanted in plan.keys:
            resolution = resolve_key(state, old.namespace, wanted, thresholds, now)
            state.add_link(resolution.key_id, new.id, LINK_WEIGHT_DEFAULT)
    _supersede(state, old, new)
    if notes:
        result["note"] = "; ".join(notes)
    return result


def forget(state: GraphState, memory: MemoryRecord, now: float) -> list[str]:
    """Hard-delete a memory, the older versions it supersedes, and their links.

    A newer version (when forgetting an old one) stays and simply loses its back-pointer.
    """
    chain = [memory]
    while chain[-1].supersedes is not None and chain[-1].supersedes in state.memories:
        chain.append(state.memories[chain[-1].supersedes])
    successor = state.memories.get(memory.superseded_by or "")
    if successor is not None:
        successor.supersedes = None
        state.touch_memory(successor)
    deleted = []
    for victim in chain:
        _drop_references(state, victim.id)
        state.delete_memory(victim, now)
        deleted.append(victim.id)
    return deleted


def _drop_references(state: GraphState, memory_id: str) -> None:
    """Remove related_to / contradicts / near_duplicates pointers at a memory that is about
    to disappear."""
    target = state.memories[memory_id]
    for other_id in {*target.contradicts, *target.near_duplicates}:
        other = state.memories.get(other_id)
        if other is None:
            continue
        if memory_id in other.contradicts or memory_id in other.near_duplicates:
            other.contradicts = _without(other.contradicts, memory_id)
            other.near_duplicates = _without(other.near_duplicates, memory_id)
            state.changes.rewrite_flags(other)
    for other_id in state.related_by.pop(memory_id, set()):
        other = state.memories.get(other_id)
        if other is not None and memory_id in other.related_to:
            other.related_to = _without(other.related_to, memory_id)
            state.changes.rewrite_related(other)


def _without(ids: tuple[str, ...], gone: str) -> tuple[str, ...]:
    return tuple(i for i in ids if i != gone)


def sweep_expired(state: GraphState, now: float) -> int:
    """Delete memories whose TTL has passed (the heap holds every expiry ever set)."""
    swept = 0
    while state.ttl_heap and state.ttl_heap[0][0] <= now:
        expires_at, memory_id = heapq.heappop(state.ttl_heap)
        memory = state.memories.get(memory_id)
        if memory is None or memory.expires_at != expires_at:
            continue
        _drop_references(state, memory_id)
        state.delete_memory(memory, now)
        swept += 1
    return swept


def drop_namespace(state: GraphState, namespace: str, now: float) -> dict[str, Any]:
    """Delete every memory (every version) and every key of one namespace; other namespaces
    are untouched (links and related_to never cross a namespace)."""
    victims = [state.memories[memory_id] for memory_id in state.namespace_ids(namespace)]
    active = sum(1 for m in victims if m.active(now))
    keys_before = sum(1 for k in state.keys.values() if k.namespace == namespace)
    for memory in victims:
        _drop_references(state, memory.id)
        state.delete_memory(memory, now)
    for key in [k for k in state.keys.values() if k.namespace == namespace]:
        state.delete_key(key)
    state.dedup.pop(namespace, None)
    return {
        "namespace": namespace,
        "memories": active,
        "versions": len(victims),
        "keys": keys_before,
    }
