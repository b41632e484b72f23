"""Hebbian learning from the hook's own traffic: a surfaced memory that the agent then reads.

The hook puts memories in front of the agent unasked (``memory.inject``); when the agent goes on
to ``read_memory`` one of them, that is the best evidence keymem gets that the path which
surfaced it was right. So the router remembers, for every memory inject surfaces, the path that
surfaced it — the matched keys and, for a memory reached by a hop, the key the hop came through
— together with every key the prompt matched, the other memories of that search, the
namespace, the hook's session id (when the host gave one) and the time. A later read of that
memory asks the graph to reinforce that path and to associate the prompt's specific keys with
the memory (``graph.reinforce_path``, ``services/graph/feedback.py``: growth scaled by the
key's specificity towards a ceiling, the unread neighbours' links decay, new learned links are
weak and capped).

Where the state lives: in the router process's memory, shared by its memory worker threads
under one lock, bounded in entries and age. It is soft state: a router restart forgets what was
surfaced, so reads right after a restart teach nothing — acceptable, since it only delays
learning; persisting it would mean a second writer or a graph write on every prompt. Only the
graph service touches the file (invariant 1): every weight change is its ``reinforce_path``.

Matching a read to a surfacing: same memory id; the read's namespace (if it names one) equals
the surfacing's; if both sides carry a session id they must be equal (the MCP server does not
know the hook's session, so its reads match on id, namespace and age alone); the surfacing is
younger than the TTL. A read credits the newest matching surfacing and retires every matching
one, so repeated reads of one surfacing count once; a new surfacing is needed to learn again.
Reads of memories that were not surfaced change nothing beyond what ``read_memory`` always did.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import BadRequest, KeymemError
from keymem.protocol.limits import DEFAULT_BUDGET_MS
from keymem.protocol.worker import remaining_ms
from keymem.services import config as cfg
from keymem.services.memory.search import Fusion, Search, SearchRequest

log = logging.getLogger("keymem.router.learning")

# How long a surfaced memory waits for the agent's read (KEYMEM_LEARN_TTL_S).
SURFACED_TTL_S: float = cfg.LEARN_TTL_S.default
# At most this many surfacings are remembered (oldest forgotten first): 2 per prompt, so a few
# thousand prompts; a linear scan of this many small records takes well under a millisecond.
SURFACED_MAX_ENTRIES = 4_096
# Other memories of the surfacing search whose links from the same keys decay when the read
# one grows (inject's search returns its top 10).
EXPLORED_MAX = 16
# The prompt's matched keys carried for association (the graph's ``PATH_MAX_KEYS`` limit; a
# search matches at most 50).
PROMPT_KEYS_MAX = 64
# Only keys the prompt names (its words are the key's concept or alias, or one of its phrases
# lands on the key) are associated: a key near the whole prompt's vector ("semantic") is a
# guess about what it is about, and wiring guesses to read memories adds noise.
NAMED_MATCHES = ("concept", "alias", "phrase")
MAX_SESSION_CHARS = 200
RELATED_VIA = "related_to"  # a hop over an explicit related_to link: no key link to grow


@dataclass(frozen=True)
class Surfacing:
    """One memory the hook surfaced, and the path that surfaced it."""

    memory_id: str
    namespace: str
    keys: tuple[str, ...]  # matched keys, then the hop's key if it was reached by a hop
    explored: tuple[str, ...]  # the other memories of that search
    session_id: str | None
    at: float  # time.monotonic() when surfaced
    prompt_keys: tuple[str, ...] = ()  # every key the prompt matched, for association

    def matches(self, memory_id: str, namespace: str | None, session_id: str | None) -> bool:
        if self.memory_id != memory_id:
            return False
        if namespace is not None and namespace != self.namespace:
            return False
        return session_id is None or self.session_id is None or session_id == self.session_id


class SurfacedLog:
    """Recent surfacings, bounded in count and age; safe to share between worker threads."""

    def __init__(
        self,
        ttl_s: float = SURFACED_TTL_S,
        max_entries: int = SURFACED_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self._entries: deque[Surfacing] = deque(maxlen=max_entries)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            self._expire(self.clock())
            return len(self._entries)

    def _expire(self, now: float) -> None:
        """Entries are appended in time order, so the expired ones are at the left."""
        while self._entries and now - self._entries[0].at > self.ttl_s:
            self._entries.popleft()

    def record(self, surfacings: list[Surfacing]) -> None:
        with self._lock:
            self._expire(self.clock())
            self._entries.extend(surfacings)

    def claim(
        self, memory_id: str, namespace: str | None, session_id: str | None
    ) -> Surfacing | None:
        """The newest live surfacing a read of ``memory_id`` answers; every match is retired."""
        with self._lock:
            self._expire(self.clock())
            matched = [s for s in self._entries if s.matches(memory_id, namespace, session_id)]
            if not matched:
                return None
            kept = [s for s in self._entries if not s.matches(memory_id, namespace, session_id)]
            self._entries.clear()
            self._entries.extend(kept)
            return matched[-1]


class TappedSearch(Search):
    """``Search`` whose searches can be watched from the calling thread.

    Inject's reply carries only what the hook prints; the path (matched keys, hop key) is in
    the search replies it ran, so the learner watches those while inject runs.
    """

    def __init__(self, client: Client, fusion: Fusion | None = None) -> None:
        super().__init__(client, fusion)
        self._local = threading.local()

    def search_all(self, requests: list[SearchRequest]) -> list[dict[str, Any]]:
        replies = super().search_all(requests)
        watched: list[dict[str, Any]] | None = getattr(self._local, "watched", None)
        if watched is not None:
            watched.extend(replies)
        return replies

    @contextlib.contextmanager
    def watch(self) -> Iterator[list[dict[str, Any]]]:
        replies: list[dict[str, Any]] = []
        self._local.watched = replies
        try:
            yield replies
        finally:
            self._local.watched = None


def path_of(candidate: dict[str, Any]) -> tuple[str, ...]:
    """The keys that surfaced a search candidate: its matched keys, then its hop's key."""
    keys = list(candidate.get("matched_keys") or [])
    via = (candidate.get("components") or {}).get("via")
    if isinstance(via, str) and via != RELATED_VIA and via not in keys:
        keys.append(via)
    return tuple(keys)


def session_of(body: dict[str, Any]) -> str | None:
    value = body.get("session_id")
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_SESSION_CHARS:
        raise BadRequest(f"session_id must be a string of at most {MAX_SESSION_CHARS} characters")
    return value or None


def surfacings_of(
    reply: dict[str, Any], searches: list[dict[str, Any]], session_id: str | None, now: float
) -> list[Surfacing]:
    """What inject surfaced, each with the path found in the search that produced it."""
    found: list[Surfacing] = []
    for shown in reply.get("memories", []):
        for search in searches:
            pool = search.get("memories", [])
            candidate = next((c for c in pool if c["memory_id"] == shown["id"]), None)
            if candidate is None:
                continue
            keys = path_of(candidate)
            prompt_keys = tuple(
                k["key_id"] for k in search.get("keys", []) if k.get("match_type") in NAMED_MATCHES
            )[:PROMPT_KEYS_MAX]
            if keys or prompt_keys:  # a BM25-only hit can still learn the prompt's keys
                explored = tuple(c["memory_id"] for c in pool if c is not candidate)
                found.append(
                    Surfacing(
                        shown["id"],
                        candidate["namespace"],
                        keys,
                        explored[:EXPLORED_MAX],
                        session_id,
                        now,
                        prompt_keys,
                    )
                )
            break
    return found


class Learner:
    """Wraps ``inject`` (remember what surfaced) and ``read_memory`` (reinforce on a read)."""

    def __init__(
        self,
        client: Client,
        recall: TappedSearch,
        inject: Callable[[Any], dict[str, Any]],
        log_: SurfacedLog | None = None,
        *,
        enabled: bool = True,
        associate: bool = False,
    ) -> None:
        self.client = client
        self.recall = recall
        self._inject = inject
        self.log = log_ if log_ is not None else SurfacedLog()
        self.enabled = enabled
        self.associate = associate

    def inject(self, body: Any) -> dict[str, Any]:
        try:  # an odd session id from the host must not cost the prompt its memories
            session_id = session_of(body) if isinstance(body, dict) else None
        except BadRequest:
            session_id = None
        with self.recall.watch() as searches:
            reply = self._inject(body)
        if self.enabled:
            self.log.record(surfacings_of(reply, searches, session_id, self.log.clock()))
        return reply

    def read_memory(self, body: Any) -> Any:
        session_id = None
        if isinstance(body, dict) and "session_id" in body:
            session_id = session_of(body)
            body = {k: v for k, v in body.items() if k != "session_id"}
        reply = self.client.call(
            "graph", "read_memory", body, timeout_ms=remaining_ms(DEFAULT_BUDGET_MS)
        )
        if not self.enabled or not isinstance(body, dict):
            return reply
        # The graph has already checked the read's namespace; the memory's own is the one a
        # surfacing of it must have.
        memory = reply["memory"]
        surfacing = self.log.claim(memory["id"], memory["namespace"], session_id)
        # a BM25-only surfacing has no path: it can teach only by association
        if surfacing is not None and (surfacing.keys or self.associate):
            learned = self._reinforce(surfacing)
            if learned is not None:
                reply["surfaced_path"] = learned
        return reply

    def _reinforce(self, surfacing: Surfacing) -> dict[str, Any] | None:
        """Best effort: the read already succeeded, and a failed lesson must not fail it."""
        body = {
            "namespace": surfacing.namespace,
            "hit": surfacing.memory_id,
            "keys": list(surfacing.keys),
            "explored": list(surfacing.explored),
        }
        if self.associate:
            body["associate"] = list(surfacing.prompt_keys)
        try:
            learned: dict[str, Any] = self.client.call(
                "graph", "reinforce_path", body, timeout_ms=remaining_ms(DEFAULT_BUDGET_MS)
            )
        except KeymemError as exc:
            log.warning("reinforcing the path of %s failed: %s", surfacing.memory_id, exc)
            return None
        return learned
