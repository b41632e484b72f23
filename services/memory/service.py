"""The ``memory`` service: keymem's agent-facing API, orchestrated inside the router process.

Agents (through the MCP front end) and the hook speak to this one service; it composes the
workers. A write gets its key vectors from the embedder and then goes to the graph, which
acknowledges it after commit; reads go to the graph; ``search`` and ``inject`` are hybrid
recall (``recall.py``, ``inject.py``). Every call it makes to another service gets
only the time its own caller has left (``remaining_ms``), so a slow dependency becomes a typed
``timeout`` for the agent, not a hang.
"""

from __future__ import annotations

from typing import Any

from keymem.protocol.client import with_idempotency_key
from keymem.protocol.errors import (
    BadRequest,
    KeymemError,
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

    def key_vectors(
        self, groups: list[tuple[Any, list[str]]], answered: list[Any] | None = None
    ) -> tuple[list[Any], str | None]:
        """One float32 matrix per ``(namespace, key texts)`` group, and the space it is in.

        A key the graph already holds under exactly this text keeps its stored vector
        (``graph.held_vectors``); only the others go to the embedder, so a remember under
        known keys makes no model call however large the vocabulary. Vectors of two spaces
        are never mixed (nor rows of two widths stacked): when the embedder's fingerprint is
        not the store's, every key is embedded and the graph refuses the write by its space,
        as it did before. A failed lookup just means every key is embedded. ``answered``: the
        graph's lookup for each group's texts, already made (remembers it refused for keys it
        does not hold).
        """
        import numpy as np

        wanted: dict[str | None, list[str]] = {}
        for namespace, texts in groups:
            if namespace is None or isinstance(namespace, str):
                wanted.setdefault(namespace, []).extend(texts)
        lookups = [(ns, list(dict.fromkeys(texts))) for ns, texts in wanted.items()]
        if answered is not None:
            lookups, outcomes = [(ns, texts) for ns, texts in groups], answered
        else:
            outcomes = self.client.call_many(
                [("graph", "held_vectors", {"keys": t, "namespace": ns}) for ns, t in lookups],
                timeout_ms=remaining_ms(DEFAULT_BUDGET_MS),
            )
        held: dict[tuple[str | None, str], Any] = {}
        fingerprint: str | None = None
        for (namespace, texts), outcome in zip(lookups, outcomes, strict=True):
            if isinstance(outcome, KeymemError):
                continue
            fingerprint = outcome["fingerprint"]
            found = [(namespace, t) for t, h in zip(texts, outcome["held"], strict=True) if h]
            held.update(zip(found, outcome["vectors"], strict=True))

        def stored(namespace: Any, text: str) -> Any:
            return held.get((namespace, text)) if isinstance(namespace, str | None) else None

        missing = list(
            dict.fromkeys(t for ns, texts in groups for t in texts if stored(ns, t) is None)
        )
        embedded: dict[str, Any] = {}
        if missing:
            vectors, embedder_space = self.embed_keys(missing)
            if held and embedder_space != fingerprint:
                held.clear()  # another space: embed them all, for the graph to judge
                missing = list(dict.fromkeys(t for _, texts in groups for t in texts))
                vectors, embedder_space = self.embed_keys(missing)
            embedded = dict(zip(missing, vectors, strict=True))
            fingerprint = embedder_space
        matrices = [
            np.stack([v if (v := stored(ns, t)) is not None else embedded[t] for t in texts])
            for ns, texts in groups
        ]
        return matrices, fingerprint

    def _with_vectors(self, item: Any, *, keys_required: bool, answered: Any = None) -> Any:
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
        (vectors,), fingerprint = self.key_vectors(
            [(item.get("namespace"), usable)], None if answered is None else [answered]
        )
        return {**item, "keys": usable, "key_vectors": vectors, **fingerprinted(fingerprint)}

    # -- writes that need vectors ----------------------------------------------------------
    def remember(self, body: Any) -> Any:
        (body,) = self.autokeys.complete([body])
        saved = self._remember(body)
        self.warmer.written()
        return saved

    def _remember(self, body: Any) -> Any:
        """One graph round trip when the graph holds every key: the write goes without
        vectors and the graph files it under the ones it stores. Otherwise it writes nothing
        and answers which keys it holds, with their vectors: only the others are embedded,
        and the write goes again with all of them."""
        usable = usable_keys(body)
        if not usable or "key_vectors" in body:
            return self._write("remember", self._with_vectors(body, keys_required=True))
        try:
            return self._write("remember", {**body, "keys": usable})
        except BadRequest as refused:
            if not refused.detail.get("unheld_keys"):
                raise
            stamped = self._with_vectors(body, keys_required=True, answered=refused.detail)
            return self._write("remember", stamped)

    def remember_each(self, body: Any) -> dict[str, Any]:
        """Several remembers, each answered as a lone ``remember`` would be (its result or
        its typed error, under its own idempotency key), in one graph trip when the graph
        holds their keys, two when some need vectors: the concurrent calls of one MCP server
        sent together (services/mcp/coalesce.py). ``seq`` is the newest item's, for the
        horizon."""
        items = batch_items(body_of(body))
        outcomes = self.autokeys.complete_each(items)
        # Keyed items go without vectors first; the rest (malformed, keyless, carrying their
        # own vectors) take the lone path, which names their problem or embeds them.
        trip = []
        for i, item in enumerate(outcomes):
            if isinstance(item, KeymemError):
                continue
            if usable_keys(item) and "key_vectors" not in item:
                trip.append(i)
            else:
                outcomes[i] = self._outcome(self._remember, item)
        if trip:
            sent = [{**outcomes[i], "keys": usable_keys(outcomes[i])} for i in trip]
            replies = self._write_each(sent)
            unheld = [
                (i, item, reply.detail)
                for i, item, reply in zip(trip, sent, replies, strict=True)
                if isinstance(reply, BadRequest) and reply.detail.get("unheld_keys")
            ]
            outcomes = _placed(outcomes, trip, replies)
            if unheld:
                matrices, fingerprint = self.key_vectors(
                    [(item.get("namespace"), item["keys"]) for _, item, _ in unheld],
                    [detail for _, _, detail in unheld],
                )
                stamped = [
                    {**item, "key_vectors": vectors, **fingerprinted(fingerprint)}
                    for (_, item, _), vectors in zip(unheld, matrices, strict=True)
                ]
                outcomes = _placed(outcomes, [i for i, _, _ in unheld], self._write_each(stamped))
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
        items = self.autokeys.complete(body["items"])
        keyed = [
            (i, [k for k in item["keys"] if k.strip()])
            for i, item in enumerate(items)
            if isinstance(item, dict)
            and isinstance(item.get("keys"), list)
            and all(isinstance(k, str) for k in item["keys"])
        ]
        if keyed:
            items = list(items)
            for i, keys in keyed:  # blank keys dropped; none left: the graph says so
                items[i] = {**items[i], "keys": keys}
            keyed = [(i, keys) for i, keys in keyed if keys]
            matrices, fingerprint = self.key_vectors(
                [(items[i].get("namespace"), keys) for i, keys in keyed]
            )
            for (i, _), vectors in zip(keyed, matrices, strict=True):
                items[i]["key_vectors"] = vectors
            body = {**body, "items": items, **fingerprinted(fingerprint)}
        saved = self._write("remember_batch", body)
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
