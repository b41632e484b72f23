"""The lexicon following the real graph service (DuckDB file, real key vectors) over the router.

Writes, corrections and forgets land while the lexicon runs and while it is stopped; after a
restart from its cache it holds exactly the graph's active memories, and read-your-writes via
``min_seq`` holds for every write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from keymem.protocol.client import Client
from keymem.services.graph import make_service
from keymem.services.stack import InprocStack
from tests.graph_helpers import open_graph
from tests.lexicon_support import (
    Running,
    assert_mirrors,
    gil_tolerant_stack,
    lexicon_starter,
    search,
    synced_to,
    wait_until,
)
from tests.vectors import remember_body

NAMESPACE = "default"


@pytest.fixture
def stack() -> Iterator[InprocStack]:
    """The graph and lexicon workers are threads of this one process."""
    yield from gil_tolerant_stack()


@pytest.fixture
def graph_client(stack: InprocStack, tmp_path: Path) -> Client:
    stack.add_worker(make_service(open_graph(tmp_path)))
    return stack.client(timeout_ms=20_000)


@pytest.fixture
def start_lexicon(stack: InprocStack, short_home: Path) -> Iterator[Callable[[], Running]]:
    yield from lexicon_starter(stack, short_home)


def active_documents(client: Client) -> dict[str, dict[str, Any]]:
    docs: dict[str, dict[str, Any]] = {}
    after = None
    while True:
        page = client.call("graph", "feed_snapshot", {"after": after, "limit": 2000})
        docs.update((doc["id"], doc) for doc in page["documents"])
        after = page["next"]
        if after is None:
            return docs


def remember(client: Client, content: str, keys: list[str]) -> tuple[str, int]:
    reply = client.call("graph", "remember", remember_body(content, keys))
    return str(reply["saved"]), int(reply["seq"])


def test_lexicon_mirrors_the_real_graph_across_restarts(
    graph_client: Client, start_lexicon: Callable[[], Running]
) -> None:
    client = graph_client
    first = start_lexicon()
    busan, seq = remember(client, "어제 부산에서 회의를 했다", ["부산 출장"])
    assert search(client, "부산", NAMESPACE, min_seq=seq) == [busan]
    assert search(client, "회의", NAMESPACE, min_seq=seq) == [busan]
    python, seq = remember(client, "keymem은 Python 3.11.2에서 돌아간다", ["keymem"])
    assert search(client, "3.11.2", NAMESPACE, min_seq=seq)[0] == python
    tokyo, seq = remember(client, "東京都に住んでいます", ["東京"])
    assert search(client, "東京", NAMESPACE, min_seq=seq) == [tokyo]

    reply = client.call("graph", "correct", {"memory_id": busan, "content": "오늘 대구에서 회의"})
    corrected, seq = reply["new_id"], reply["seq"]
    assert search(client, "부산", NAMESPACE, min_seq=seq) == [corrected]  # via its inherited key
    assert search(client, "대구", NAMESPACE, min_seq=seq) == [corrected]
    seq = client.call("graph", "forget", {"memory_id": tokyo})["seq"]
    assert search(client, "東京都", NAMESPACE, min_seq=seq) == []
    wait_until(synced_to(client, seq), "the first writes")
    assert_mirrors(first, active_documents(client))

    first.stop()
    later = [
        remember(client, f"메모 {i}번: 서울 날씨와 회의 기록 v{i}", [f"기록{i}"]) for i in range(8)
    ]
    reply = client.call("graph", "correct", {"memory_id": later[0][0], "content": "광주 출장"})
    seq = client.call("graph", "forget", {"memory_id": later[1][0]})["seq"]

    second = start_lexicon()
    assert second.lexicon.cache_state["loaded"] is True
    wait_until(synced_to(client, seq), "catching up after the restart")
    assert_mirrors(second, active_documents(client))
    assert second.lexicon.follower.stats.snapshots == 0
    assert search(client, "광주", NAMESPACE) == [reply["new_id"]]
