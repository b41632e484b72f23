"""What an agent's reading and judging teach the graph: Hebbian reads, confirm, dismiss, autokey.

``reinforce_path`` is the graph half of learning from the hook's traffic
(``services/router/learning.py``): a memory the hook surfaced and the agent then read grows the
links that surfaced it, by a share of the distance to a ceiling (twice the link's starting
weight) scaled by the key's specificity (hub keys say nothing about which memory a question
wants), and the same keys' links to memories that were shown but not read shrink back
towards their starting weight, never below it. So hook traffic alone keeps every link within
[its starting weight, twice that] (or leaves it where explicit reads and dismissals put it).
The prompt's specific keys the read memory lacked get a weak *learned* link (fire together,
wire together): capped per read, per memory and per key, fading when shown but not read, left
out of the key's IDF and of the lexicon's document, so it counts only at its own weight.

A read reinforces only the edge it traversed (+0.1, capped at 3.0) and never touches depth or
freshness; only evidence-backed ``confirm_memory`` deepens a memory (+0.05) and restarts its
freshness. ``dismiss`` weakens one edge (-0.3) down to the floor 0.1, never severing it.
Autokey: a short query that matched a key only weakly (semantically), followed by a confirmed
read through that key, earns heat; three earn the query a place as a learned alias. A query
that matched no key at all offers its nearest keys (a near miss): three reads through the same
one promote it too, although its cosine is below the alias floor — the agent chose that key
for that query three times.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from keymem.protocol.errors import BadRequest, NotFound
from keymem.protocol.fields import body_of
from keymem.services.graph.requests import (
    evidence_of,
    id_list,
    namespace_of,
    opt_str,
    req_str,
    source_of,
)
from keymem.services.graph.state import (
    DEPTH_MAX,
    LINK_WEIGHT_DEFAULT,
    LINK_WEIGHT_MIN,
    GraphState,
    clamp_depth,
)
from keymem.services.graph.text import is_short_concept
from keymem.services.graph.validity import SECONDS_PER_DAY, validity_view
from keymem.services.graph.views import memory_view
from keymem.services.graph.writes import AUTO_LINK_WEIGHT, live_memory
from keymem.store.records import AliasCandidate, KeyAlias, LinkRecord, to_json

READ_REINFORCE_STEP = 0.1
DISMISS_STEP = 0.3
CONFIRM_DEPTH_STEP = 0.05
AUTOKEY_PROMOTE_COUNT = 3
AUTOKEY_MAX_LEARNED_ALIASES = 8
AUTOKEY_PRUNE_AGE_DAYS = 30.0
AUTOKEY_BUFFER_CAPACITY = 32
AUTOKEY_BUFFER_TTL_S = 300.0
MAX_CANDIDATES_PER_KEY = 64
# Learning from the hook's traffic (reinforce_path). A read surfaced memory's path link moves
# this share of the way to its ceiling; a shown-but-unread memory's link from the same keys
# moves this share of the way back to its starting weight. Dimensionless, per event.
PATH_GROWTH_RATE = 0.1
PATH_DECAY_RATE = 0.05
# Hook learning never takes a link above this multiple of its starting weight (1.0 for an
# agent's key, 0.5 for an auto key): bounded however often the same path is read.
PATH_CEILING_FACTOR = 2.0
PATH_MAX_KEYS = 64
PATH_MAX_EXPLORED = 64
# Association (fire together, wire together): a key the prompt matched but the read memory is
# not linked to gets a learned link starting at this weight (half an auto key's, a quarter of
# an agent's), auto-typed, growing like any link on later credited reads to at most twice
# that and fading to the weight floor when shown but not read.
LEARNED_LINK_WEIGHT = 0.25
# Only keys at least this specific (normalised IDF: 0.5 = on at most √N of the namespace's N
# memories) associate. Learned links do not count as the key's memories (they would dilute its
# IDF for the memories written with it), so they have caps of their own.
ASSOCIATE_MIN_SPECIFICITY = 0.5
ASSOCIATE_MAX_PER_READ = 3  # new learned links per credited read, the most specific keys first
LEARNED_MAX_PER_MEMORY = 8  # learned links a memory may ever hold
LEARNED_MAX_PER_KEY = 8  # learned links a key may ever hold


@dataclass
class WeakMatch:
    query: str
    scores: dict[str, float]  # key id -> cosine of a weak (semantic, non-literal) match
    at: float
    # The query matched no key at all and these are its nearest: the agent's reads through
    # one of them are the only evidence of what it meant, so they promote below the floor.
    near_miss: bool = False


@dataclass
class RecallBuffer:
    """Recent queries' weak key matches; runtime only, bounded in size and age."""

    entries: deque[WeakMatch] = field(default_factory=lambda: deque(maxlen=AUTOKEY_BUFFER_CAPACITY))

    def push(self, query: str, scores: dict[str, float], *, near_miss: bool = False) -> None:
        if scores:
            self.entries.append(WeakMatch(query, dict(scores), time.monotonic(), near_miss))

    def consume(self, key_id: str) -> tuple[str, float, bool] | None:
        """The newest fresh query that weakly matched ``key_id`` (query, cosine, near miss);
        each query counts once."""
        cutoff = time.monotonic() - AUTOKEY_BUFFER_TTL_S
        for entry in reversed(self.entries):
            if entry.at >= cutoff and key_id in entry.scores:
                return entry.query, entry.scores.pop(key_id), entry.near_miss
        return None


def _learn_alias(
    state: GraphState, buffer: RecallBuffer, key_id: str, floor: float, now: float
) -> str | None:
    weak = buffer.consume(key_id)
    key = state.keys.get(key_id)
    if weak is None or key is None:
        return None
    query, cosine, near_miss = weak
    norm = query.strip().lower()
    if len(norm) < 2 or any(s.strip().lower() == norm for s in key.surfaces()):
        return None
    candidate = key.candidates.get(norm)
    if candidate is None:
        if len(key.candidates) >= MAX_CANDIDATES_PER_KEY:
            stalest = min(key.candidates, key=lambda n: key.candidates[n].last_seen)
            del key.candidates[stalest]
        candidate = key.candidates[norm] = AliasCandidate(query.strip(), 0, now)
    candidate.count += 1
    candidate.last_seen = now
    state.changes.rewrite_candidates(key)
    learned = sum(1 for a in key.aliases if a.learned)
    if (
        candidate.count >= AUTOKEY_PROMOTE_COUNT
        and is_short_concept(query)
        and (cosine >= floor or near_miss)
        and learned < AUTOKEY_MAX_LEARNED_ALIASES
    ):
        del key.candidates[norm]
        if state.add_alias(key, KeyAlias(query.strip(), learned=True, added_at=now)):
            return query.strip()
    return None


def read_memory(
    state: GraphState, buffer: RecallBuffer, raw: Any, alias_floor: float, now: float
) -> dict[str, Any]:
    body = body_of(raw)
    memory = live_memory(state, req_str(body, "memory_id"), namespace_of(body), now)
    via = opt_str(body, "via_key_id")
    link = None
    if via is not None:
        link = state.link(via, memory.id)
        if link is None:
            raise BadRequest(f"key {via} is not linked to memory {memory.id}")
    memory.access_count += 1
    memory.last_accessed = now
    state.touch_memory(memory)
    learned = None
    if link is not None:
        state.set_weight(link, link.weight + READ_REINFORCE_STEP)
        if memory.superseded_by is None:
            learned = _learn_alias(state, buffer, link.key_id, alias_floor, now)
    view = memory_view(state, memory, now)
    for key in view["keys"]:
        key["traversed_from"] = key["key_id"] == via
    result: dict[str, Any] = {"evidence": "read", "memory": view, "via_key_id": via}
    if learned:
        result["learned_alias"] = learned
    return result


def confirmation_id_of(body: dict[str, Any], source: dict[str, Any] | None) -> str | None:
    """Idempotence per (agent, session, turn): explicit id, else derived from the source."""
    explicit = opt_str(body, "confirmation_id", 200)
    if explicit:
        return explicit
    if source and all(
        source.get(k) is not None for k in ("host_agent", "host_session", "host_turn")
    ):
        return f"{source['host_agent']}:{source['host_session']}:{source['host_turn']}"
    return None


def confirm_memory(state: GraphState, raw: Any, now: float) -> dict[str, Any]:
    body = body_of(raw)
    evidence = evidence_of(body)
    source = source_of(body)
    memory = live_memory(state, req_str(body, "memory_id"), namespace_of(body), now)
    if memory.superseded_by is not None:
        raise NotFound(
            f"memory {memory.id} was superseded by {memory.superseded_by}; confirm the current one",
            {"superseded_by": memory.superseded_by},
        )
    confirmation_id = confirmation_id_of(body, source)
    if confirmation_id is not None and memory.last_confirmation_id == confirmation_id:
        return {
            "memory_id": memory.id,
            "confirmed": False,
            "duplicate": True,
            "validity": validity_view(memory, now),
        }
    memory.last_confirmed_at = now
    memory.confirmation_count += 1
    memory.depth = clamp_depth(min(DEPTH_MAX, memory.depth + CONFIRM_DEPTH_STEP))
    memory.last_confirmation_evidence = evidence
    memory.last_confirmation_source = to_json(source)
    memory.last_confirmation_id = confirmation_id
    state.touch_memory(memory)
    state.changes.confirm(
        memory.id,
        now,
        evidence,
        to_json(source),
        confirmation_id,
    )
    return {
        "memory_id": memory.id,
        "confirmed": True,
        "duplicate": False,
        "depth": round(memory.depth, 3),
        "validity": validity_view(memory, now),
    }


def dismiss(state: GraphState, buffer: RecallBuffer, raw: Any, now: float) -> dict[str, Any]:
    body = body_of(raw)
    memory = live_memory(state, req_str(body, "memory_id"), namespace_of(body), now)
    key_id = req_str(body, "key_id")
    link = state.link(key_id, memory.id)
    if link is None:
        raise NotFound(f"key {key_id} is not linked to memory {memory.id}")
    before = link.weight
    state.set_weight(link, before - DISMISS_STEP)
    cleared = None
    weak = buffer.consume(key_id)
    key = state.keys[key_id]
    if weak is not None:
        norm = weak[0].strip().lower()
        candidate = key.candidates.get(norm)
        if candidate is not None:
            candidate.count -= 1
            if candidate.count <= 0:
                del key.candidates[norm]
            state.changes.rewrite_candidates(key)
        cleared = weak[0]
    return {
        "memory_id": memory.id,
        "key_id": key_id,
        "concept": key.concept,
        "previous_link_weight": round(before, 3),
        "link_weight": round(link.weight, 3),
        "floored": link.weight <= LINK_WEIGHT_MIN,
        "alias_candidate_cleared": cleared,
    }


def prune_learned_aliases(state: GraphState, now: float) -> int:
    """Learned aliases never hit within 30 days of being added (or last hit) are dropped."""
    cutoff = now - AUTOKEY_PRUNE_AGE_DAYS * SECONDS_PER_DAY
    pruned = 0
    for key in list(state.keys.values()):
        for alias in [a for a in key.aliases if a.learned]:
            if max(alias.added_at, alias.last_hit_at) < cutoff:
                state.remove_alias(key, alias)
                pruned += 1
    return pruned


def starting_weight(link: LinkRecord) -> float:
    """The weight a link was created with: what hook learning decays back towards."""
    if link.learned:
        return LEARNED_LINK_WEIGHT
    return AUTO_LINK_WEIGHT if link.auto else LINK_WEIGHT_DEFAULT


def decay_floor(link: LinkRecord) -> float:
    """Where a shown-but-unread link decays to: its start, or for a learned association the
    weight floor — an association that is not confirmed again fades out."""
    return LINK_WEIGHT_MIN if link.learned else starting_weight(link)


def specificity(key_count: int, namespace_count: int) -> float:
    """How specific a key is in its namespace, in [0, 1]: ``1 - ln(n_k) / ln(N)`` for a key on
    ``n_k`` of the namespace's ``N`` active memories (normalised IDF). A key on one memory is
    1, a key on every memory (a LoCoMo speaker's name) 0, a key on √N memories 0.5. Hub keys
    say nothing about which of their memories a question wants, so they learn nothing."""
    if key_count <= 1 or namespace_count <= 1:
        return 1.0
    return max(0.0, 1.0 - math.log(key_count) / math.log(namespace_count))


def active_in_namespace(state: GraphState, namespace: str, now: float) -> int:
    """Active memories of a namespace: one pass over the memories (~10 ms per 100k), paid per
    credited read, not per prompt."""
    return sum(1 for m in state.memories.values() if m.namespace == namespace and m.active(now))


def _link_row(link: LinkRecord, before: float) -> dict[str, Any]:
    return {
        "key_id": link.key_id,
        "memory_id": link.memory_id,
        "before": round(before, 6),
        "weight": round(link.weight, 6),
    }


def _associable(
    state: GraphState, namespace: str, hit: str, key_ids: list[str], total: int
) -> list[tuple[float, str]]:
    """The prompt's keys that may learn a link to ``hit``, most specific first: live keys of the
    namespace not yet linked to it, at least ``ASSOCIATE_MIN_SPECIFICITY`` specific, with room
    under ``LEARNED_MAX_PER_KEY``; at most as many as the hit has room for.

    A key of another namespace is a caller's error (namespaces never leak); a key deleted
    since the surfacing is skipped, as a path that is gone teaches nothing.
    """
    own = state.mem_links[hit]
    ranked = []
    for key_id in key_ids:
        key = state.keys.get(key_id)
        if key is None:
            continue
        if key.namespace != namespace:
            raise BadRequest(f"key {key_id} is not a key of namespace {namespace!r}")
        count = state.active_count.get(key_id, 0)
        share = specificity(count, total)
        if key_id in own or count == 0 or share < ASSOCIATE_MIN_SPECIFICITY:
            continue
        members = state.key_links[key_id].values()
        if sum(1 for link in members if link.learned) < LEARNED_MAX_PER_KEY:
            ranked.append((share, key_id))
    ranked.sort(key=lambda item: -item[0])  # stable: the prompt's own order breaks ties
    learned = sum(1 for link in own.values() if link.learned)
    room = max(0, min(ASSOCIATE_MAX_PER_READ, LEARNED_MAX_PER_MEMORY - learned))
    return ranked[:room]


def prepare_reinforce_path(
    state: GraphState, raw: Any, now: float
) -> Callable[[float], dict[str, Any]]:
    """Hebbian learning from a surfaced-then-read memory, bounded (see the module docstring).

    Body: ``namespace``, ``hit`` (the memory read), ``keys`` (the keys that surfaced it),
    ``explored`` (the other memories of that surfacing), ``associate`` (optional: the keys
    the prompt matched; those not linked to the hit may gain a learned link). Keys no longer
    linked to the hit are skipped: the graph may have changed since the surfacing, and a path
    that is gone teaches nothing. Validated before anything changes.
    """
    body = body_of(raw)
    namespace = namespace_of(body)
    hit = req_str(body, "hit")
    key_ids = id_list(body, "keys", PATH_MAX_KEYS)
    explored = id_list(body, "explored", PATH_MAX_EXPLORED) if body.get("explored") else []
    associate = id_list(body, "associate", PATH_MAX_KEYS) if body.get("associate") else []
    memory = state.memories.get(hit)
    if memory is None or memory.namespace != namespace or not memory.active(now):
        raise NotFound(f"memory {hit} is not an active memory of namespace {namespace!r}")
    total = active_in_namespace(state, namespace, now)
    grown = [link for key_id in key_ids if (link := state.link(key_id, hit)) is not None]
    shrunk = [
        link
        for key_id in key_ids
        if (key := state.keys.get(key_id)) is not None and key.namespace == namespace
        for other in explored
        if other != hit and (link := state.link(key_id, other)) is not None
    ]
    new_keys = _associable(state, namespace, hit, associate, total)

    def action(now: float) -> dict[str, Any]:
        reinforced, decayed, associated = [], [], []
        for link in grown:
            before = link.weight
            ceiling = PATH_CEILING_FACTOR * starting_weight(link)
            rate = PATH_GROWTH_RATE * specificity(state.active_count.get(link.key_id, 0), total)
            if before < ceiling and rate > 0:
                state.set_weight(link, before + rate * (ceiling - before))
                reinforced.append(_link_row(link, before))
        for link in shrunk:
            before = link.weight
            floor = decay_floor(link)
            if before > floor:
                state.set_weight(link, before - PATH_DECAY_RATE * (before - floor))
                decayed.append(_link_row(link, before))
        for _, key_id in new_keys:
            state.add_link(key_id, hit, LEARNED_LINK_WEIGHT, auto=True, learned=True)
            associated.append(_link_row(state.mem_links[hit][key_id], 0.0))
        return {
            "hit": hit,
            "reinforced": reinforced,
            "decayed": decayed,
            "associated": associated,
        }

    return action
