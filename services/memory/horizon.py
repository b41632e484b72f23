"""Read your writes (invariant 10): a read that follows an acknowledged write sees it.

The graph answers from its in-memory state, so its own reads already see every committed
write; the lexicon's BM25 index follows the graph's change feed and may lag it by a poll.
Every graph write replies with ``seq``, the feed position of its commit. The memory service
keeps the newest such ``seq`` it has passed back to any caller (its *horizon*, shared by the
service's worker threads), and every lexicon read it makes carries that horizon as
``min_seq``: the lexicon applies the feed up to it before answering, within the request's
time. So search, recall and inject right after a remember find it, whoever asks, without
the caller threading the ``seq`` through; a caller's own ``min_seq`` still counts when it
is newer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from keymem.protocol.client import Client

# The lexicon methods whose answers depend on the indexed documents.
LEXICON_READS = frozenset({("lexicon", "search"), ("lexicon", "coverage")})


class WriteHorizon:
    """The feed position of the newest write the memory service acknowledged."""

    def __init__(self) -> None:
        self._seq = 0
        self._lock = threading.Lock()

    @property
    def seq(self) -> int:
        return self._seq

    def advance(self, reply: Any) -> None:
        """Move past a write's reply (a map with the graph's ``seq``; anything else is ignored)."""
        seq = reply.get("seq") if isinstance(reply, dict) else None
        if isinstance(seq, int) and not isinstance(seq, bool):
            with self._lock:
                self._seq = max(self._seq, seq)

    def tracking(self, handler: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``handler`` (a write) advancing the horizon with each reply it returns."""

        def tracked(body: Any) -> Any:
            reply = handler(body)
            self.advance(reply)
            return reply

        tracked.__name__ = getattr(handler, "__name__", "write")
        return tracked


class ConsistentClient(Client):
    """A client whose lexicon reads wait for every write behind the horizon."""

    def __init__(self, endpoint: str, horizon: WriteHorizon) -> None:
        super().__init__(endpoint)
        self.horizon = horizon

    def call_many(
        self, calls: Sequence[tuple[str, str, Any]], *, timeout_ms: int | None = None
    ) -> list[Any]:
        seq = self.horizon.seq
        if seq:
            calls = [
                (service, method, at_least(body, seq))
                if (service, method) in LEXICON_READS
                else (service, method, body)
                for service, method, body in calls
            ]
        return super().call_many(calls, timeout_ms=timeout_ms)


def at_least(body: Any, seq: int) -> Any:
    """``body`` asking for the index as of ``seq`` or a newer ``min_seq`` it names itself."""
    if not isinstance(body, dict):
        return body  # the lexicon names the problem
    own = body.get("min_seq")
    if isinstance(own, int) and not isinstance(own, bool) and own >= seq:
        return body
    return {**body, "min_seq": seq}
