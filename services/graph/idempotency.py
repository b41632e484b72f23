"""Idempotent writes: one commit per idempotency key, and a retry gets the first commit's result.

A caller that cannot tell whether its write committed (the reply was lost because the router
or the graph died, or its wait ran out) sends the same write again with the same
``idempotency_key``. The key and the write's result are committed in the write's own
transaction (on one of the write's change-feed event rows, or in ``write_outcomes`` when it
appends none: store/schema.py, v7), so a key in the ledger is a write that is on disk, and the
retry is answered from the ledger without running again: a committed write is never reported as
failed to an agent that retries, and never applied twice. Keys are kept ``RETAINED_S``, far
longer than any caller's deadline; a key reused for another method is a ``conflict``.
"""

from __future__ import annotations

import time
from typing import Any

from keymem.protocol.client import IDEMPOTENCY_KEY
from keymem.protocol.codec import pack, unpack
from keymem.protocol.errors import BadRequest, Conflict
from keymem.store.changes import Changes
from keymem.store.database import GraphStore
from keymem.store.records import Outcome

KEY_FIELD = IDEMPOTENCY_KEY
MAX_KEY_CHARS = 128
RETAINED_S = 3_600.0


def key_of(body: Any) -> str | None:
    """The request's idempotency key, if it sent one."""
    if not isinstance(body, dict) or body.get(KEY_FIELD) is None:
        return None
    key = body[KEY_FIELD]
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_CHARS:
        raise BadRequest(f"{KEY_FIELD} must be a string of 1..{MAX_KEY_CHARS} characters")
    return key


class Ledger:
    """The committed outcomes of keyed writes of the last ``RETAINED_S``, by key."""

    def __init__(self, store: GraphStore) -> None:
        self.store = store
        self.outcomes: dict[str, Outcome] = store.load_outcomes(time.time() - RETAINED_S)

    def replay(self, method: str, key: str) -> dict[str, Any] | None:
        """The first commit's result for ``key``, or None when no write with it committed."""
        found = self.outcomes.get(key)
        if found is None:
            return None
        if found.method != method:
            raise Conflict(f"{KEY_FIELD} {key!r} was already used for {found.method}")
        result: dict[str, Any] = unpack(found.result)
        return result

    @staticmethod
    def stage(changes: Changes, method: str, key: str, result: dict[str, Any], now: float) -> None:
        """Commit ``result`` under ``key`` with the write's own transaction."""
        changes.record_outcome(key, Outcome(method, pack(result), now))

    def committed(self, changes: Changes) -> None:
        """The transaction that carried ``changes`` committed: its outcomes are final."""
        self.outcomes.update(changes.outcomes)

    def prune(self, now: float) -> int:
        """Forget keys older than ``RETAINED_S``; returns how many. The file's
        ``write_outcomes`` is pruned too whether or not the ledger held any: the feed's own
        pruning moves the outcomes of the event rows it drops there, old or not."""
        cutoff = now - RETAINED_S
        old = [key for key, outcome in self.outcomes.items() if outcome.committed_at < cutoff]
        for key in old:
            del self.outcomes[key]
        self.store.prune_outcomes(cutoff)
        return len(old)
