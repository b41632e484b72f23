"""Writing a benchmark into keymem through the router's ``memory`` service, as an agent would.

Memories go in with ``memory.remember_batch`` (the graph's limit of 200 items a call), so they
take the product's real write path: key embedding in the router, the graph's commit, the
lexicon's change feed. per_query files get one namespace per question holding its
``memory_ids`` (a fresh ~10-paragraph store each); pooled files keep the memory's namespace.
The result maps every keymem id back to the benchmark ids it stands for (exact duplicates in
one namespace are merged by the graph, so one keymem id can stand for two benchmark ids).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from keymem.protocol.client import Client
from keymem.protocol.errors import BadRequest, KeymemError
from keymem.protocol.limits import BATCH_MAX_ITEMS, CONTENT_MAX_CHARS
from keymem.services.evaluation.dataset import Benchmark, DatasetError, Memory, Query
from keymem.services.evaluation.progress import Progress

KeyMode = Literal["provided", "title", "auto"]
KEY_MODES: tuple[KeyMode, ...] = ("provided", "title", "auto")
WRITE_TIMEOUT_MS = 120_000  # one batch: 200 items, their keys embedded, one commit
CATCH_UP_TIMEOUT_S = 300.0
CATCH_UP_POLL_MS = 2_000
# The memory service's idle-time pass embeds the loaded memories' heads for the dense leg
# (services/memory/warmup.py); a load waits until every one has its vector, and gives up only
# once the backlog has not shrunk for this long (a store's size sets the whole wait).
VECTORS_STALL_S = 120.0
VECTORS_POLL_S = 0.5
PER_QUERY_NAMESPACE = "eval-q{position}"


class LoadError(RuntimeError):
    """The benchmark could not be written into keymem; the message says what to do."""


def default_key_mode(benchmark: Benchmark) -> KeyMode:
    """The richest keys the file supports: agents' keys, else titles, else none (auto-keys)."""
    if benchmark.has_keys:
        return "provided"
    if benchmark.has_titles:
        return "title"
    return "auto"


def check_key_mode(benchmark: Benchmark, mode: KeyMode) -> None:
    if mode == "provided" and not benchmark.has_keys:
        raise DatasetError(
            f"{benchmark.name} has no keys (only hotpot_blindkeys40 does); "
            "use --keys title or --keys auto"
        )
    if mode == "title" and not benchmark.has_titles:
        raise DatasetError(f"{benchmark.name} has no titles; use --keys auto")


def keys_for(memory: Memory, mode: KeyMode) -> list[str] | None:
    if mode == "provided":
        return list(memory.keys) if memory.keys else None
    if mode == "title":
        return [memory.title] if memory.title else None
    return None


def query_namespace(benchmark: Benchmark, position: int, query: Query) -> str:
    """The namespace a query searches in keymem."""
    if benchmark.setting == "per_query":
        return PER_QUERY_NAMESPACE.format(position=position)
    return query.namespace


@dataclass
class LoadedStore:
    """What the eval needs after loading: id mapping, namespaces, and what was changed."""

    namespaces: list[str]  # per query, in query order
    benchmark_ids: dict[str, list[str]] = field(default_factory=dict)  # keymem id -> bench ids
    written: int = 0
    truncated: int = 0  # contents cut to the graph's CONTENT_MAX_CHARS
    keyless: int = 0
    merged: int = 0  # exact duplicates the graph merged into an earlier memory
    last_seq: int = 0
    seconds: float = 0.0

    def to_benchmark(self, keymem_ids: Sequence[str]) -> list[str]:
        """A keymem ranking as benchmark ids (unknown ids dropped, duplicates kept once)."""
        ranking: list[str] = []
        for keymem_id in keymem_ids:
            for benchmark_id in self.benchmark_ids.get(keymem_id, ()):
                if benchmark_id not in ranking:
                    ranking.append(benchmark_id)
        return ranking


@dataclass(frozen=True)
class _Pending:
    benchmark_id: str
    item: dict[str, Any]


def _items(benchmark: Benchmark, mode: KeyMode, store: LoadedStore) -> Iterator[_Pending]:
    if benchmark.setting == "per_query":
        by_id = {m.id: m for m in benchmark.memories}
        placements = [
            (store.namespaces[position], by_id[memory_id])
            for position, query in enumerate(benchmark.queries)
            for memory_id in query.memory_ids or ()
        ]
    else:
        placements = [(m.namespace, m) for m in benchmark.memories]
    for namespace, memory in placements:
        content = memory.content
        if len(content) > CONTENT_MAX_CHARS:
            content = content[:CONTENT_MAX_CHARS]
            store.truncated += 1
        item: dict[str, Any] = {"content": content, "namespace": namespace}
        keys = keys_for(memory, mode)
        if keys:
            item["keys"] = keys
            if mode == "provided" and memory.key_types:
                item["key_types"] = dict(memory.key_types)  # names are entities, not concepts
        else:
            store.keyless += 1
        yield _Pending(memory.id, item)


def _keyless_hint(benchmark: Benchmark) -> str:
    """What to do when keymem refuses keyless memories, for this file."""
    if benchmark.has_keys or benchmark.has_titles:
        return "use --keys title (or provided) meanwhile"
    return (
        "this file has neither keys nor titles, so only the baselines can run on it until then "
        "(--methods bm25,dense,hybrid)"
    )


def _write(client: Client, batch: list[_Pending], store: LoadedStore, hint: str) -> None:
    try:
        reply = client.call(
            "memory",
            "remember_batch",
            {"items": [p.item for p in batch]},
            timeout_ms=WRITE_TIMEOUT_MS,
        )
    except BadRequest as exc:
        position = exc.detail.get("item")
        keyless = isinstance(position, int) and "keys" not in batch[position].item
        if keyless:
            raise LoadError(
                f"keymem rejected a memory without keys ({exc.message}): its auto-keys found "
                f"nothing key-like in the text; {hint}"
            ) from exc
        raise LoadError(f"keymem rejected a batch: {exc}") from exc
    except KeymemError as exc:
        raise LoadError(f"keymem could not store a batch: {exc}") from exc
    for pending, result in zip(batch, reply["results"], strict=True):
        saved = str(result["saved"])
        mapped = store.benchmark_ids.setdefault(saved, [])
        superseded = result.get("superseded")
        if superseded is not None:  # an exact duplicate: the new id stands for both
            mapped.extend(store.benchmark_ids.pop(str(superseded), []))
            store.merged += 1
        mapped.append(pending.benchmark_id)
    store.written += len(batch)
    store.last_seq = max(store.last_seq, int(reply.get("seq", 0)))


def load(client: Client, benchmark: Benchmark, mode: KeyMode, progress: Progress) -> LoadedStore:
    """Write every memory of ``benchmark`` into keymem; wait until the lexicon has them all."""
    check_key_mode(benchmark, mode)
    started = time.monotonic()
    store = LoadedStore([query_namespace(benchmark, i, q) for i, q in enumerate(benchmark.queries)])
    pending = list(_items(benchmark, mode, store))
    bar = progress.bar(f"loading into keymem (--keys {mode})", len(pending))
    for start in range(0, len(pending), BATCH_MAX_ITEMS):
        batch = pending[start : start + BATCH_MAX_ITEMS]
        _write(client, batch, store, _keyless_hint(benchmark))
        bar.advance(len(batch))
    bar.close()
    wait_for_lexicon(client, store.last_seq, store.namespaces[0] if store.namespaces else "default")
    wait_for_vectors(client)
    store.seconds = time.monotonic() - started
    return store


def wait_for_lexicon(client: Client, seq: int, namespace: str) -> None:
    """Block until the lexicon has applied the change feed up to ``seq`` (read-your-writes)."""
    give_up = time.monotonic() + CATCH_UP_TIMEOUT_S
    body = {"query": "eval", "namespace": namespace, "min_seq": seq, "wait_ms": CATCH_UP_POLL_MS}
    while True:
        try:
            reply = client.call("lexicon", "search", body, timeout_ms=CATCH_UP_POLL_MS * 2)
            if reply.get("caught_up"):
                return
        except KeymemError:
            pass  # busy indexing: ask again
        if time.monotonic() > give_up:
            raise LoadError(
                f"the lexicon did not catch up to seq {seq} in {CATCH_UP_TIMEOUT_S:.0f} s"
            )


def wait_for_vectors(client: Client) -> None:
    """Block until every active memory has its passage vector, so the dense leg proposes
    from the whole store and two loads of one file give the same figures."""
    left, moved_at = -1, time.monotonic()
    while True:
        try:
            missing = int(client.call("graph", "vector_backlog", {})["missing"])
        except KeymemError:
            missing = left  # busy: ask again
        if missing == 0:
            return
        if missing != left:
            left, moved_at = missing, time.monotonic()
        elif time.monotonic() - moved_at > VECTORS_STALL_S:
            waiting = f"{missing} memories" if missing >= 0 else "the graph did not answer:"
            raise LoadError(
                f"{waiting} still without a passage vector after {VECTORS_STALL_S:.0f} s "
                "(is the reranker, the embedder or the graph down?)"
            )
        time.sleep(VECTORS_POLL_S)
