"""Helpers for the lexicon's service-level tests: start/stop a lexicon worker in an in-process
stack, wait for it to sync, and check that its index mirrors a source of documents exactly."""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from keymem.protocol.client import Client
from keymem.protocol.worker import HeartbeatPolicy
from keymem.services.lexicon.service import Lexicon, make_service
from keymem.services.lexicon.sync import document_text, text_digest
from keymem.services.lexicon.tokenizer import shared_tokenizer
from keymem.services.router.process import ORCHESTRATION_LIVENESS
from keymem.services.stack import InprocStack, RunningWorker

WAIT_S = 30.0
POLL_S = 0.02


class Running:
    """One lexicon worker in the stack, with the in-process handle tests inspect."""

    def __init__(self, stack: InprocStack, home: Path) -> None:
        self.lexicon = Lexicon(stack.settings(home), shared_tokenizer())
        self.worker: RunningWorker = stack.add_worker(make_service(self.lexicon))

    def stop(self) -> None:
        self.worker.stop()
        assert not self.worker.thread.is_alive()


def gil_tolerant_stack() -> Iterator[InprocStack]:
    """Body of a ``stack`` fixture whose workers are threads beside a lexicon: a Kiwi load, a
    bulk first index or a cache load holds the GIL long enough, on a busy box, to miss
    conftest's 0.3 s liveness, so these stacks use the orchestration liveness."""
    with InprocStack(heartbeat=HeartbeatPolicy(100, ORCHESTRATION_LIVENESS)) as running:
        yield running


def lexicon_starter(stack: InprocStack, home: Path) -> Iterator[Callable[[], Running]]:
    """Body of a ``start_lexicon`` fixture: start lexicons on demand, stop them afterwards."""
    running: list[Running] = []

    def start() -> Running:
        lexicon = Running(stack, home)
        running.append(lexicon)
        return lexicon

    yield start
    for lexicon in running:
        if lexicon.worker.thread.is_alive():
            lexicon.stop()


def wait_until(check: Callable[[], bool], what: str) -> None:
    give_up = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > give_up:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(POLL_S)


def synced_to(client: Client, seq: int) -> Callable[[], bool]:
    def check() -> bool:
        sync = client.call("lexicon", "index_stats")["sync"]
        return bool(sync["synced"] and sync["phase"] == "live" and sync["seq"] >= seq)

    return check


def search_reply(client: Client, body: dict[str, Any]) -> dict[str, Any]:
    """A search reply; with ``min_seq``, the first that says it caught up to it.

    One call waits only a fraction of the (fast, in tests) heartbeat expiry for the feed, so on a
    loaded machine it may answer ``caught_up: false``; the invariant is that a reply claiming
    ``caught_up`` reflects every write up to ``min_seq``.
    """
    give_up = time.monotonic() + WAIT_S
    while True:
        reply: dict[str, Any] = client.call("lexicon", "search", body)
        if "min_seq" not in body or reply["caught_up"]:
            if "min_seq" in body:
                assert reply["seq"] >= body["min_seq"]
            return reply
        if time.monotonic() > give_up:
            raise AssertionError(f"search never caught up to seq {body['min_seq']}")


def search(client: Client, query: str, namespace: str = "ns", **extra: Any) -> list[str]:
    body = {"query": query, "namespace": namespace, "top_n": 10, **extra}
    return [hit["id"] for hit in search_reply(client, body)["hits"]]


def assert_mirrors(running: Running, docs: Mapping[str, dict[str, Any]]) -> None:
    """The index holds exactly ``docs`` (the source's active documents), each with its terms."""
    index = running.lexicon.index
    assert sorted(index.ids(None)) == sorted(docs)
    assert running.lexicon.follower.consistent is True
    for namespace in {doc["namespace"] for doc in docs.values()}:
        in_namespace = sorted(index.ids(namespace))
        assert in_namespace == sorted(d for d, doc in docs.items() if doc["namespace"] == namespace)
    tokenizer = shared_tokenizer()
    for doc_id, doc in docs.items():
        indexed = index.namespaces[doc["namespace"]].terms_of(doc_id)
        assert indexed == dict(Counter(tokenizer.tokenize(document_text(doc)))), doc_id


FORMAT2_MAGIC = b"KMLEXC\x00\x01"


def write_format2_cache(path: Path, docs: Mapping[str, list[str]], *, tokenizer: str) -> None:
    """A term cache as the format-2 release wrote it (its magic, a BLAKE2b checksum, one
    msgpack payload with each namespace's ids, digests and arrays), all in namespace "ns" at
    epoch "e1", seq 1: what an upgrade finds on disk."""
    ids = sorted(docs)
    vocab = sorted({term for terms in docs.values() for term in terms})
    rows = [sorted(Counter(docs[doc_id]).items()) for doc_id in ids]
    ptr = np.cumsum([0, *(len(row) for row in rows)])
    tids = [vocab.index(term) for row in rows for term, _ in row]
    tfs = [tf for row in rows for _, tf in row]
    order = sorted(range(len(tids)), key=lambda i: (tids[i], i))
    term_ptr = np.cumsum([0, *np.bincount(tids, minlength=len(vocab))])
    row_of = np.repeat(np.arange(len(ids)), np.diff(ptr))
    space = {
        "name": "ns",
        "ids": ids,
        "digests": [text_digest(doc_id) for doc_id in ids],
        "vocab": vocab,
        "ptr": ptr.astype("<i8").tobytes(),
        "tids": np.asarray(tids, "<i4").tobytes(),
        "tfs": np.asarray(tfs, "<i4").tobytes(),
        "term_ptr": term_ptr.astype("<i8").tobytes(),
        "term_rows": row_of[order].astype("<i4").tobytes(),
        "term_tfs": np.asarray(tfs, "<i4")[order].tobytes(),
    }
    body = {"format": 2, "tokenizer": tokenizer, "epoch": "e1", "seq": 1, "namespaces": [space]}
    payload = msgpack.packb(body, use_bin_type=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(FORMAT2_MAGIC + hashlib.blake2b(payload, digest_size=32).digest() + payload)
