"""keymem's side of the eval: hybrid recall (``memory.search``) and the inject path.

Both methods are the product's, reached through the router exactly as the MCP front end and
the hook reach them; this module only asks and maps ids back. A build without one of them is
not an error of the eval: the row is reported as unavailable (``MethodUnavailable``) and the
baselines still run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import InternalError
from keymem.services.evaluation.baselines import Ranked
from keymem.services.evaluation.loader import LoadedStore

SEARCH = "search"
INJECT = "inject"
HOPS = 2  # hybrid recall's hop depth for the eval
QUERY_TIMEOUT_MS = 30_000
WARM_UP_CALLS = 3  # unscored searches, until one comes back undegraded
# Where a recalled memory's id may be: the agreed "id", or the graph's own "memory_id".
MEMORY_ID_FIELDS = ("id", "memory_id")


class MethodUnavailable(RuntimeError):
    """This keymem build does not offer a method the eval needs; the message names it."""


def offered_methods(client: Client) -> set[str]:
    """The methods the router's ``memory`` service currently offers."""
    stats = client.call("router", "stats")
    service: dict[str, Any] = stats.get("services", {}).get("memory", {})
    return {str(m) for m in service.get("methods", [])}


def require(client: Client, method: str) -> None:
    if method not in offered_methods(client):
        raise MethodUnavailable(
            f"memory.{method} is not available in the keymem build serving this deployment"
        )


def memory_ids(reply: Any) -> list[str]:
    """The ranked ids of a ``memory.search``/``inject`` reply; ``InternalError`` if malformed."""
    memories = reply.get("memories") if isinstance(reply, dict) else None
    if not isinstance(memories, list):
        raise InternalError("reply has no 'memories' list")
    ids = []
    for item in memories:
        found = [item[f] for f in MEMORY_ID_FIELDS if isinstance(item, dict) and f in item]
        if not found:
            raise InternalError(f"a recalled memory has none of {MEMORY_ID_FIELDS}: {item!r:.200}")
        ids.append(str(found[0]))
    return ids


@dataclass
class KeymemRecall:
    client: Client
    store: LoadedStore
    top_k: int

    def warm_up(self, text: str, namespace: str) -> None:
        """Unscored searches first: the reranker's first call after start loads its model and
        can miss its deadline (the search then degrades to no reranker), which would cost
        whichever query happens to run first."""
        body = {"query": text, "namespace": namespace, "top_k": 1}
        for _ in range(WARM_UP_CALLS):
            reply = self.client.call("memory", SEARCH, body, timeout_ms=QUERY_TIMEOUT_MS)
            if not reply.get("degraded"):
                return

    def search(self, text: str, namespace: str) -> Ranked:
        """Hybrid recall's ranking as benchmark ids; a ``KeymemError`` if the call failed."""
        body = {"query": text, "namespace": namespace, "top_k": self.top_k, "hops": HOPS}
        started = time.perf_counter()
        reply = self.client.call("memory", SEARCH, body, timeout_ms=QUERY_TIMEOUT_MS)
        ms = (time.perf_counter() - started) * 1000
        return Ranked(self.store.to_benchmark(memory_ids(reply)), ms)

    def inject(self, prompt: str, namespace: str) -> list[str]:
        """What the inject path puts in front of the agent for ``prompt``, as benchmark ids."""
        body = {"prompt": prompt, "namespace": namespace}
        reply = self.client.call("memory", INJECT, body, timeout_ms=QUERY_TIMEOUT_MS)
        return self.store.to_benchmark(memory_ids(reply))
