"""The change feed contract, as the lexicon uses it, over the router (msgpack + float32 arrays).

A subscriber that takes the head, pages the snapshot while writes keep landing, then applies
``feed_since`` must end up with exactly the graph's active documents: every remember, correct,
alias merge, forget and TTL expiry reflected, nothing missed, nothing stale.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keymem.protocol.client import Client
from keymem.protocol.errors import Conflict
from keymem.services.graph import GraphService, make_service
from keymem.services.stack import InprocStack
from tests.graph_helpers import open_graph
from tests.vectors import remember_body

SWEEP_INTERVAL_S = 0.05


@pytest.fixture
def served(stack: InprocStack, tmp_path: Path) -> Iterator[tuple[Client, GraphService]]:
    graph = open_graph(tmp_path)
    stack.add_worker(make_service(graph, sweep_interval_s=SWEEP_INTERVAL_S))
    yield stack.client(), graph


class Subscriber:
    """A minimal lexicon: documents by id, kept current by snapshot + events."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.docs: dict[str, dict[str, Any]] = {}
        self.seq = 0
        self.epoch = ""

    def bootstrap(self, during_paging: list[dict[str, Any]]) -> None:
        head = self.client.call("graph", "feed_head")
        self.seq, self.epoch = head["seq"], head["epoch"]
        after = None
        while True:
            page = self.client.call("graph", "feed_snapshot", {"after": after, "limit": 3})
            for doc in page["documents"]:
                self.docs[doc["id"]] = doc
            if during_paging:  # a write lands between pages
                self.client.call("graph", "remember", during_paging.pop())
            after = page["next"]
            if after is None:
                break

    def catch_up(self) -> None:
        while True:
            reply = self.client.call("graph", "feed_since", {"seq": self.seq, "limit": 4})
            assert reply["epoch"] == self.epoch
            for event in reply["events"]:
                assert event["seq"] == self.seq + 1
                self.seq = event["seq"]
                if event["op"] == "upsert":
                    self.docs[event["id"]] = event["doc"]
                else:
                    self.docs.pop(event["id"], None)
            if self.seq >= reply["head"]:
                return


def _truth(client: Client) -> dict[str, dict[str, Any]]:
    docs: dict[str, dict[str, Any]] = {}
    after = None
    while True:
        page = client.call("graph", "feed_snapshot", {"after": after, "limit": 2000})
        docs.update({d["id"]: d for d in page["documents"]})
        after = page["next"]
        if after is None:
            return docs


def test_snapshot_plus_events_converge_to_the_active_documents(
    served: tuple[Client, GraphService],
) -> None:
    client, _graph = served
    ids = [
        client.call("graph", "remember", remember_body(f"fact {i} about tea", ["tea", f"t{i}"]))[
            "saved"
        ]
        for i in range(8)
    ]
    subscriber = Subscriber(client)
    extra = [remember_body(f"written while paging {i}", ["paging"]) for i in range(3)]
    subscriber.bootstrap(extra)
    subscriber.catch_up()
    assert subscriber.docs == _truth(client)

    fixed = client.call("graph", "correct", {"memory_id": ids[0], "content": "tea, corrected"})
    assert fixed["seq"] == client.call("graph", "feed_head")["seq"]  # read-your-writes handle
    client.call("graph", "forget", {"memory_id": ids[1]})
    # a cross-lingual alias joins "tea": every memory under it gets new keys in its document
    client.call("graph", "remember", remember_body("차는 녹차가 좋다", ["tea"]))
    client.call("graph", "remember", remember_body("brief", ["tea"], ttl_seconds=0.2))
    client.call("graph", "remember", remember_body("fact 3 about tea", ["tea"]))  # exact dup
    time.sleep(0.4)  # expiry, then the service's own sweep
    subscriber.catch_up()
    truth = _truth(client)
    assert subscriber.docs == truth
    assert ids[0] not in truth and ids[1] not in truth and fixed["new_id"] in truth
    assert "tea" in truth[fixed["new_id"]]["keys"]


def test_a_subscriber_behind_retained_history_is_told_to_resnapshot(
    stack: InprocStack, tmp_path: Path
) -> None:
    graph = open_graph(tmp_path)
    for i in range(5):
        graph.remember(remember_body(f"note {i}", ["note"]))
    graph.state.first_seq = graph.store.prune_events(keep=2, head_seq=graph.state.head_seq)
    stack.add_worker(make_service(graph))
    client = stack.client()
    with pytest.raises(Conflict) as caught:
        client.call("graph", "feed_since", {"seq": 0})
    assert caught.value.detail["resnapshot"] is True
    assert len(client.call("graph", "feed_since", {"seq": 3})["events"]) == 2


def test_a_new_store_has_a_new_epoch(tmp_path: Path) -> None:
    first = open_graph(tmp_path / "a")
    second = open_graph(tmp_path / "b")
    try:
        assert first.feed_head({})["epoch"] != second.feed_head({})["epoch"]
    finally:
        first.close()
        second.close()
