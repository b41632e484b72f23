"""Helpers for the lexicon's service-level tests: start/stop a lexicon worker in an in-process
stack, wait for it to sync, and check that its index mirrors a source of documents exactly."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from keymem.protocol.client import Client
from keymem.services.lexicon.service import Lexicon, make_service
from keymem.services.lexicon.sync import document_text
from keymem.services.lexicon.tokenizer import shared_tokenizer
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
