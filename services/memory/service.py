"""The ``memory`` service: keymem's agent-facing API, orchestrated inside the router process.

Agents (through the MCP front end) and the hook speak to this one service; it composes the
workers. A write goes to the graph without key vectors (it files the keys it holds by their
text; the ones it names as new are embedded and the write sent again: ``MemoryAPI.filed``)
and is acknowledged after commit; reads go to the graph; ``search`` and ``inject`` are hybrid
recall (``recall.py``, ``inject.py``). Every call it makes to another service gets
only the time its own caller has left (``remaining_ms``), so a slow dependency becomes a typed
``timeout`` for the agent, not a hang.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from keymem.protocol.client import with_idempotency_key
from keymem.protocol.errors import (
    BadRequest,
    KeymemError,
    KeysUnheld,
    Unavailable,
    outcome_from_wire,
    outcome_to_wire,
)
from keymem.protocol.fields import batch_items, body_of
from keymem.protocol.limits import DEFAULT_BUDGET_MS
from keymem.protocol.worker import Service, remaining_ms
from keymem.services import config as cfg
from keymem.services.config import Config, load
from keymem.services.graph.text import usable_key
from keymem.services.journal import FLUSH_INTERVAL_S, Journal
from keymem.services.memory.autokeys import AutoKeys
from keymem.services.memory.horizon import ConsistentClient, WriteHorizon
from keymem.services.memory.inject import Gate, Inject
from keymem.services.memory.journaled import journaled
from keymem.services.memory.learning import (
    Learner,
    SurfacedLog,
    TappedSearch,
)
from keymem.services.memory.navigation import Navigation
from keymem.services.memory.search import GATED_FUSION, Search
from keymem.services.memory.warmup import Warmer

# The embedder's per-request limit on texts; larger batches are split and sent in parallel.
EMBED_TEXTS_PER_CALL = 256

# A write's fields that carry key vectors (and their space): the memory service's alone.
VECTOR_FIELDS = ("key_vectors", "embedded_keys", "embedded_vectors", "fingerprint")

# Graph methods the agent API exposes unchanged (they need no vectors). read_memory is not
# among them: it goes through the learner, which teaches the graph when it reads what inject
# surfaced (learning.py).
GRAPH_PASSTHROUGH = (
    "browse_keys",
    "confirm_memory",
    "dismiss",
    "forget",
    "history",
    "counts",
    "get_memories",
    "brief",
)
# Of those, the ones that change nothing and may be retried after a worker dies.
IDEMPOTENT = {"browse_keys", "history", "counts", "get_memories", "brief"}


class MemoryAPI:
    def __init__(self, router_endpoint: str, horizon: WriteHorizon, warmer: Warmer) -> None:
        self.client = ConsistentClient(router_endpoint, horizon)
        self.autokeys = AutoKeys(self.client)
        self.warmer = warmer

    def _call(self, service: str, method: str, body: Any) -> Any:
        return self.client.call(service, method, body, timeout_ms=remaining_ms(DEFAULT_BUDGET_MS))

    def _write(self, method: str, body: Any) -> Any:
        """A graph write, sent again under one idempotency key while the graph is restarting:
        it commits once, and a commit whose reply was lost still reaches the agent."""
        return self.client.call(
            "graph",
            method,
            with_idempotency_key(body),
            timeout_ms=remaining_ms(DEFAULT_BUDGET_MS),
            retry=True,
        )

    def embed_keys(self, texts: list[str]) -> tuple[Any, str]:
        """Key vectors for ``texts`` (one float32 row each) and the embedder's fingerprint."""
        import numpy as np

        chunks = [
            texts[i : i + EMBED_TEXTS_PER_CALL] for i in range(0, len(texts), EMBED_TEXTS_PER_CALL)
        ]
        outcomes = self.client.call_many(
            [("embedder", "embed", {"texts": chunk, "kind": "key"}) for chunk in chunks],
            timeout_ms=remaining_ms(DEFAULT_BUDGET_MS),
        )
        for outcome in outcomes:
            if isinstance(outcome, KeymemError):
                if isinstance(outcome, Unavailable):  # transient stays transient
                    raise Unavailable(
                        f"cannot embed keys: {outcome.message}", outcome.detail
                    ) from outcome
                raise outcome
        fingerprints = {outcome["fingerprint"] for outcome in outcomes}
        if len(fingerprints) != 1:
            raise Unavailable("embedder workers disagree on their model; retry after a restart")
        return np.concatenate([o["vectors"] for o in outcomes]), fingerprints.pop()

    def key_vectors(self, namespace: Any, texts: list[str]) -> tuple[Any, str | None]:
        """A float32 matrix for ``texts`` (one row each), keys of ``namespace``, and its space.

        A key the graph already holds under exactly this text keeps its stored vector
        (``graph.held_vectors``); only the others go to the embedder. Vectors of two spaces
        are never mixed (nor rows of two widths stacked): when the embedder's fingerprint is
        not the store's, every key is embedded and the graph refuses the write by its space.
        A failed lookup just means every key is embedded.
        """
        import numpy as np

        unique = list(dict.fromkeys(texts))
        held: dict[str, Any] = {}
        fingerprint: str | None = None
        if namespace is None or isinstance(namespace, str):
            try:
                answer = self._call(
                    "graph", "held_vectors", {"keys": unique, "namespace": namespace}
                )
            except KeymemError:
                answer = None
            if answer is not None:
                fingerprint = answer["fingerprint"]
                found = [t for t, h in zip(unique, answer["held"], strict=True) if h]
                held.update(zip(found, answer["vectors"], strict=True))
        missing = [t for t in unique if t not in held]
        if missing:
            vectors, embedder_space = self.embed_keys(missing)
            if held and embedder_space != fingerprint:
                held.clear()  # another space: embed them all, for the graph to judge
                missing = unique
                vectors, embedder_space = self.embed_keys(missing)
            held.update(zip(missing, vectors, strict=True))
            fingerprint = embedder_space
        return np.stack([held[t] for t in texts]), fingerprint

    def _with_vectors(self, item: Any, *, keys_required: bool) -> Any:
        """``item`` with ``key_vectors`` (and the fingerprint of their space) for its keys.

        Keys that are not a list of strings are passed on untouched: the graph names the
        problem. Blank keys are dropped here because the graph would drop them anyway.
        """
        if not isinstance(item, dict):
            raise BadRequest(f"body must be a map, got {type(item).__name__}")
        keys = item.get("keys")
        if keys is None and not keys_required:
            return item
        usable = usable_keys(item)
        if usable is None:
            return item
        if not usable:
            return {**item, "keys": usable}
        vectors, fingerprint = self.key_vectors(item.get("namespace"), usable)
        return {**item, "keys": usable, "key_vectors": vectors, **fingerprinted(fingerprint)}

    def filed(self, bodies: list[Any], send: Callable[[list[Any]], list[Any]]) -> list[Any]:
        """``send``'s outcome for each of ``bodies`` (remembers, or batches of them), written
        with no key vectors: the graph files every key it holds by its text, so a write under
        known keys is one graph round trip and no vector crosses the wire.

        A body the graph refuses for keys it does not hold (``unheld_keys``: nothing written,
        every other check passed) goes again carrying the vectors of exactly the texts named
        (``embedded_keys``, ``embedded_vectors``, in the embedder's space ``fingerprint``,
        which the graph checks against its own). A key dropped between two tries is named by
        the next refusal, so bodies go again while a refusal names a text not yet embedded
        for them: at most once per text. Any other outcome is final.
        """
        import numpy as np

        outcomes = send(bodies)
        named: list[list[str]] = [[] for _ in bodies]
        vectors: dict[str, Any] = {}
        space: str | None = None
        while True:
            again = {
                i: new
                for i, outcome in enumerate(outcomes)
                if (new := [t for t in unheld_keys(outcome) if t not in named[i]])
            }
            if not again:
                return outcomes
            wanted = list(dict.fromkeys(t for texts in again.values() for t in texts))
            wanted = [t for t in wanted if t not in vectors]
            if wanted:
                embedded, embedder_space = self.embed_keys(wanted)
                if space is not None and embedder_space != space:
                    raise Unavailable("the embedder changed its model during a write; retry")
                space = embedder_space
                vectors.update(zip(wanted, embedded, strict=True))
            for i, texts in again.items():
                named[i].extend(texts)
            resent = [
                {
                    **bodies[i],
                    "embedded_keys": list(named[i]),
                    "embedded_vectors": np.stack([vectors[t] for t in named[i]]),
                    **fingerprinted(space),
                }
                for i in again
            ]
            outcomes = _placed(outcomes, list(again), send(resent))

    def _write_filed(self, method: str, body: Any) -> Any:
        """One write (``remember``, ``remember_batch``) of ``body`` as ``filed`` sends it."""
        (outcome,) = self.filed([body], self.alone(method))
        if isinstance(outcome, KeymemError):
            raise outcome
        return outcome

    def alone(self, method: str) -> Callable[[list[Any]], list[Any]]:
        """A ``filed`` send of ``method``: each body its own write, its outcome a result or
        a ``KeymemError``."""
        return lambda bodies: [self._outcome(partial(self._write, method), b) for b in bodies]

    # -- writes that need vectors ----------------------------------------------------------
    def remember(self, body: Any) -> Any:
        (body,) = self.autokeys.complete([body])
        saved = self._write_filed("remember", unvectored(body))
        self.warmer.written()
        return saved

    def remember_each(self, body: Any) -> dict[str, Any]:
        """Several remembers, each answered as a lone ``remember`` would be (its result or
        its typed error, under its own idempotency key), in one graph trip when the graph
        holds their keys, two when some need vectors: the concurrent calls of one MCP server
        sent together (services/mcp/coalesce.py). ``seq`` is the newest item's, for the
        horizon."""
        items = batch_items(body_of(body))
        outcomes = self.autokeys.complete_each(items)
        trip = [i for i, item in enumerate(outcomes) if not isinstance(item, KeymemError)]
        if trip:
            sent = [unvectored(outcomes[i]) for i in trip]
            outcomes = _placed(outcomes, trip, self.filed(sent, self._write_each))
        self.warmer.written()
        seqs = [o["seq"] for o in outcomes if isinstance(o, dict) and isinstance(o.get("seq"), int)]
        return {"results": [outcome_to_wire(o) for o in outcomes], "seq": max(seqs, default=0)}

    def _write_each(self, items: list[Any]) -> list[Any]:
        """The graph's outcome for each item (a result or a ``KeymemError``), in one request."""
        reply = self._write("remember_each", {"items": [with_idempotency_key(i) for i in items]})
        return [outcome_from_wire(item) for item in reply["results"]]

    @staticmethod
    def _outcome(write: Any, item: Any) -> Any:
        try:
            return write(item)
        except KeymemError as exc:
            return exc

    def correct(self, body: Any) -> Any:
        stamped = self._with_vectors(body, keys_required=False)
        if inherits_keys(stamped):
            stamped = self._with_text_vectors(stamped)
        saved = self._write("correct", stamped)
        self.warmer.written()
        return saved

    def _with_text_vectors(self, body: dict[str, Any]) -> dict[str, Any]:
        """A correction that inherits its keys carries vectors of the old and the new text, so
        the graph can drop inherited keys the rewrite moved away from (writes.still_fits).
        Without them (embedder down, a bad body) the graph judges by the words alone."""
        memory_id, content = body.get("memory_id"), body.get("content")
        if not isinstance(memory_id, str) or not isinstance(content, str):
            return body  # the graph names the problem
        scope = {k: v for k, v in body.items() if k == "namespace"}
        try:
            chain = self._call("graph", "history", {"memory_id": memory_id, **scope})
            current = next(v for v in chain["versions"] if v["id"] == chain["current"])
            embedded = self._call(
                "embedder", "embed", {"texts": [current["content"], content], "kind": "query"}
            )
        except (KeymemError, StopIteration):
            return body
        return {**body, "text_vectors": embedded["vectors"]}

    def remember_batch(self, body: Any) -> Any:
        if not isinstance(body, dict) or not isinstance(body.get("items"), list):
            return self._write("remember_batch", body)  # the graph names the problem
        items = [unvectored(item) for item in self.autokeys.complete(body["items"])]
        saved = self._write_filed("remember_batch", {**unvectored(body), "items": items})
        self.warmer.written()
        return saved

    def passthrough(self, method: str) -> Any:
        def handler(body: Any) -> Any:
            if method in IDEMPOTENT:
                return self._call("graph", method, body)
            return self._write(method, body)

        handler.__name__ = method
        return handler


def _placed(outcomes: list[Any], positions: list[int], replies: list[Any]) -> list[Any]:
    """``outcomes`` with ``replies`` put in at ``positions``."""
    placed = list(outcomes)
    for position, reply in zip(positions, replies, strict=True):
        placed[position] = reply
    return placed


def unvectored(body: Any) -> Any:
    """A write's body without vectors of its caller's: the memory service sends the ones the
    graph lacks (``MemoryAPI.filed``), in the space the store is in."""
    if not isinstance(body, dict):
        return body  # the graph names the problem
    return {k: v for k, v in body.items() if k not in VECTOR_FIELDS}


def unheld_keys(outcome: Any) -> list[str]:
    """The key texts a write was refused for because the graph does not hold them."""
    named = outcome.detail.get("unheld_keys") if isinstance(outcome, KeysUnheld) else None
    if not isinstance(named, list) or not all(isinstance(t, str) for t in named):
        return []
    return named


def usable_keys(item: Any) -> list[str] | None:
    """An item's keys without the blank ones (the graph would drop them anyway); None when
    the item or its keys are malformed, which the graph names."""
    keys = item.get("keys") if isinstance(item, dict) else None
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        return None
    return [k for k in keys if k.strip()]


def fingerprinted(fingerprint: str | None) -> dict[str, str]:
    """The ``fingerprint`` field of a write whose vectors are in that space (none if unknown)."""
    return {} if fingerprint is None else {"fingerprint": fingerprint}


def inherits_keys(body: Any) -> bool:
    """Whether a correction reuses the old version's keys: it names none that could be a key."""
    if not isinstance(body, dict):
        return False
    keys = body.get("keys")
    return keys is None or (
        isinstance(keys, list)
        and all(isinstance(k, str) for k in keys)
        and not any(usable_key(k) for k in keys)
    )


def make_service(
    router_endpoint: str,
    surfaced: SurfacedLog | None = None,
    horizon: WriteHorizon | None = None,
    config: Config | None = None,
    journal: Journal | None = None,
    warmer: Warmer | None = None,
) -> Service:
    """One worker's service. Workers of one process must share ``surfaced`` (what inject
    showed) and ``horizon`` (the newest acknowledged write), or a read served by another
    thread than the inject would teach nothing, and one served by another thread than the
    write could miss it. ``config``: the process's settings (read now if not given);
    ``journal``: where recall, search and inject are recorded (one per process); ``warmer``:
    the idle-time pass that makes written memories' passage vectors (warmup.py), shared so
    that it groups every thread's writes and waits while any thread's request runs (without
    one, this service has its own and closes it when it stops)."""
    config = config or load()
    journal = journal or Journal(config[cfg.HOME], "memory")
    own_warmer = warmer is None
    warmer = warmer if warmer is not None else Warmer(router_endpoint)
    api = MemoryAPI(router_endpoint, horizon if horizon is not None else WriteHorizon(), warmer)
    track = api.client.horizon.tracking
    recall = Search(api.client)
    navigation = Navigation(api.client)
    service = Service("memory")
    service.add("recall", journaled(journal, "recall", navigation.recall), idempotent=True)
    service.add("read_key", navigation.read_key, idempotent=True)
    service.add("search", journaled(journal, "search", recall.search), idempotent=True)
    # Inject gets its own watched Search: the learner reads the paths off its searches.
    tapped = TappedSearch(api.client, GATED_FUSION)
    learner = Learner(
        api.client,
        tapped,
        Inject(tapped, Gate(min_relevance=config[cfg.INJECT_MIN_RELEVANCE])).inject,
        surfaced if surfaced is not None else SurfacedLog(config[cfg.LEARN_TTL_S]),
        enabled=config[cfg.LEARN_FROM_READS],
        associate=config[cfg.LEARN_ASSOCIATE],
    )
    service.add("inject", journaled(journal, "inject", learner.inject), idempotent=True)
    service.add("remember", track(api.remember))
    service.add("remember_each", track(api.remember_each))
    service.add("remember_batch", track(api.remember_batch))
    service.add("correct", track(api.correct))
    service.add("read_memory", track(learner.read_memory))
    for method in GRAPH_PASSTHROUGH:
        idempotent = method in IDEMPOTENT
        handler = api.passthrough(method)
        service.add(method, handler if idempotent else track(handler), idempotent=idempotent)
    service.every(FLUSH_INTERVAL_S, journal.flush)
    service.on_stop.append(journal.flush)
    service.on_stop.append(api.client.close)  # its sockets, not left to the context's end
    if own_warmer:
        service.on_stop.append(warmer.close)
    return warmer.yield_to(service)  # warm only while none of its requests is in flight
