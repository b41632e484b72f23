"""The lexicon service over real sockets: search, bad input, and sync with the graph's feed.

The graph side is ``FeedDouble`` (tests/lexicon_feed_double.py), registered as ``graph`` in the
same in-process stack, so the lexicon follows it through the router exactly as it follows the
real graph service. Kiwi is loaded once per process (``shared_tokenizer``).
"""

from __future__ import annotations

import mmap
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from keymem.protocol.client import Client
from keymem.protocol.errors import BadRequest, TooLarge
from keymem.protocol.worker import Service
from keymem.services.lexicon import cache
from keymem.services.lexicon import service as service_module
from keymem.services.lexicon.journal import JOURNAL_FILE
from keymem.services.lexicon.tokenizer import TOKENIZER_VERSION
from keymem.services.stack import InprocStack
from tests.lexicon_feed_double import FeedDouble
from tests.lexicon_support import (
    WAIT_S,
    Running,
    assert_mirrors,
    gil_tolerant_stack,
    lexicon_starter,
    search,
    search_reply,
    synced_to,
    wait_until,
    write_format2_cache,
)


@pytest.fixture
def stack() -> Iterator[InprocStack]:
    """The lexicon and the feed double are threads of this one process."""
    yield from gil_tolerant_stack()


@pytest.fixture
def feed(stack: InprocStack) -> FeedDouble:
    double = FeedDouble()
    stack.add_worker(double.service())
    return double


@pytest.fixture
def start_lexicon(stack: InprocStack, short_home: Path) -> Iterator[Callable[[], Running]]:
    yield from lexicon_starter(stack, short_home)


# -- search ------------------------------------------------------------------------------------
def test_search_finds_inflected_korean_japanese_mixed_and_versions(
    stack: InprocStack, feed: FeedDouble, start_lexicon: Callable[[], Running]
) -> None:
    start_lexicon()
    client = stack.client()
    feed.put("m-busan", "어제 부산에서 회의를 했다")
    feed.put("m-tokyo", "東京都に住んでいます")
    feed.put("m-py311", "keymem에서 Python 3.11.2를 썼다")
    feed.put("m-py312", "Python 3.12.1 업그레이드는 다음 분기")
    feed.put("m-keys", "내용은 짧다", keys=["DuckDB", "저장소"])
    last = feed.put("m-other", "서울 날씨가 맑다", namespace="other")
    assert search(client, "부산", min_seq=last) == ["m-busan"]
    assert search(client, "회의") == ["m-busan"]
    assert search(client, "부산에서 열린 회의")[0] == "m-busan"
    assert search(client, "東京") == ["m-tokyo"]
    assert search(client, "3.11.2")[0] == "m-py311"
    assert search(client, "python") == ["m-py311", "m-py312"] or set(search(client, "python")) == {
        "m-py311",
        "m-py312",
    }
    assert search(client, "duckdb") == ["m-keys"]  # keys are indexed with the content
    assert search(client, "서울") == []  # another namespace
    assert search(client, "서울", namespace="other") == ["m-other"]
    reply = client.call("lexicon", "search", {"query": "부산에서", "namespace": "ns"})
    assert reply["score_kind"] == "bm25" and reply["tokens"] == ["부산"]
    assert reply["seq"] == last and reply["caught_up"] is True


def test_read_your_writes_with_min_seq(
    stack: InprocStack, feed: FeedDouble, start_lexicon: Callable[[], Running]
) -> None:
    start_lexicon()
    client = stack.client()
    for i in range(20):
        seq = feed.put(f"m{i}", f"메모 번호 {i} marker{i}")
        assert search(client, f"marker{i}", min_seq=seq) == [f"m{i}"]
    seq = feed.delete("m3")
    assert search(client, "marker3", min_seq=seq) == []
    seq = feed.other_write()  # no memory changed, but the seq moved: still caught up
    reply = search_reply(client, {"query": "메모", "namespace": "ns", "min_seq": seq})
    assert reply["caught_up"] is True and reply["seq"] == seq


def test_min_seq_beyond_the_graph_answers_without_hanging(
    stack: InprocStack, feed: FeedDouble, start_lexicon: Callable[[], Running]
) -> None:
    start_lexicon()
    client = stack.client()
    seq = feed.put("m1", "부산 회의")
    wait_until(synced_to(client, seq), "the write")
    reply = client.call(
        "lexicon", "search", {"query": "부산", "namespace": "ns", "min_seq": seq + 1000}
    )
    assert reply["caught_up"] is False
    assert [h["id"] for h in reply["hits"]] == ["m1"]


def test_bad_input_gets_typed_errors_or_empty_results(
    stack: InprocStack, feed: FeedDouble, start_lexicon: Callable[[], Running]
) -> None:
    start_lexicon()
    client = stack.client()
    seq = feed.put("m1", "어제 부산에서 회의를 했다")
    wait_until(synced_to(client, seq), "the first document")
    assert search(client, "") == []
    assert search(client, "   \n\t ") == []
    assert search(client, "부산", namespace="no-such-namespace") == []
    assert search(client, "\x00\x01부산\x07\x1b[31m") == ["m1"]  # control characters are spaces
    with pytest.raises(TooLarge):
        search(client, "부산 " * 350_000)  # ~1 MB
    with pytest.raises(TooLarge):
        client.call("lexicon", "extract_keys", {"text": "x" * 1_000_000})
    bad_bodies: list[Any] = [
        None,
        "부산",
        [1, 2],
        {"namespace": "ns"},
        {"query": 5, "namespace": "ns"},
        {"query": "부산"},
        {"query": "부산", "namespace": "ns", "top_n": 0},
        {"query": "부산", "namespace": "ns", "top_n": "10"},
        {"query": "부산", "namespace": "ns", "top_n": True},
        {"query": "부산", "namespace": "ns", "min_seq": -1},
        {"query": "부산", "namespace": "x" * 10_000},
    ]
    for body in bad_bodies:
        with pytest.raises((BadRequest, TooLarge)):
            client.call("lexicon", "search", body)
    for method, body in [("extract_keys", {}), ("extract_keys", {"text": 3}), ("coverage", [])]:
        with pytest.raises(BadRequest):
            client.call("lexicon", method, body)
    with pytest.raises(BadRequest):
        client.call("lexicon", "extract_keys", {"text": "부산", "limit": 0})
    # still up and still right
    assert client.call("lexicon", "ping")["pong"] is True
    assert search(client, "회의") == ["m1"]


def test_coverage_weighs_what_a_query_is_about(
    stack: InprocStack, feed: FeedDouble, start_lexicon: Callable[[], Running]
) -> None:
    """The share of a query's idf weight a document holds: rare words count most, function
    words not at all, and a word no document has counts against every document."""
    start_lexicon()
    client = stack.client()
    feed.put("race", "Melanie ran a charity race for mental health")
    feed.put("paint", "Caroline paints sunsets with Melanie")
    feed.put("guitar", "Caroline plays the guitar with Melanie")
    seq = feed.put("lake", "Melanie swam in the lake with Caroline")
    wait_until(synced_to(client, seq), "four documents")

    def coverage(query: str, ids: list[str], namespace: str = "ns") -> dict[str, Any]:
        body = {"query": query, "namespace": namespace, "ids": ids}
        reply: dict[str, Any] = client.call("lexicon", "coverage", body)
        return reply

    ids = ["race", "paint", "guitar", "ghost"]
    reply = coverage("What did Caroline realize after her charity race?", ids)
    # no "what", "did"; English words by their stems
    assert reply["terms"] == ["carolin", "realiz", "chariti", "race"]
    race, paint, guitar, ghost = reply["coverage"]
    assert ghost is None  # not indexed in this namespace
    assert paint == guitar and 0 < paint < race < 1  # "realize" is in no document
    assert coverage("charity race", ["race"])["coverage"] == [pytest.approx(1.0)]
    # another inflection of the same English words is the same words ("paints sunsets")
    assert coverage("painting a sunset", ["paint", "guitar"])["coverage"] == [
        pytest.approx(1.0),
        0.0,
    ]
    assert coverage("the and of", ["race"])["coverage"] == [0.0]  # nothing left to cover
    assert coverage("charity", ["race"], namespace="other")["coverage"] == [None]
    for body in [
        {"query": "race", "namespace": "ns"},
        {"query": "race", "namespace": "ns", "ids": "race"},
        {"query": "race", "namespace": "ns", "ids": [1]},
        {"query": "race", "namespace": "ns", "ids": ["m"] * 101},
        {"query": 3, "namespace": "ns", "ids": []},
    ]:
        with pytest.raises(BadRequest):
            client.call("lexicon", "coverage", body)


def test_extract_keys_method(
    stack: InprocStack, feed: FeedDouble, start_lexicon: Callable[[], Running]
) -> None:
    start_lexicon()
    client = stack.client()
    keys = client.call(
        "lexicon", "extract_keys", {"text": "김철수 교수가 Claude Code로 keymem 3.11.2를 고쳤다"}
    )["keys"]
    found = {k["key"]: k["kind"] for k in keys}
    assert found["Claude Code"] == "name"
    assert found["김철수"] == "proper"
    assert found["3.11.2"] == "term"
    assert all(set(k) == {"key", "kind", "count"} for k in keys)


# -- sync ---------------------------------------------------------------------------------------
def churn(feed: FeedDouble, rng: random.Random, steps: int, next_id: list[int]) -> None:
    """Writes, corrections (some moving namespace) and deletes across two namespaces."""
    for _ in range(steps):
        roll = rng.random()
        live = sorted(feed.docs)
        if roll < 0.45 or not live:
            next_id[0] += 1
            n = next_id[0]
            feed.put(f"m{n:05d}", f"메모 {n}: 부산 회의 단어{n % 37}", rng.choice(["ns", "ns2"]))
        elif roll < 0.75:
            doc_id = rng.choice(live)
            namespace = feed.docs[doc_id]["namespace"]
            if rng.random() < 0.1:  # now and then a memory moves to the other namespace
                namespace = "ns2" if namespace == "ns" else "ns"
            feed.put(doc_id, f"고친 내용 {rng.randrange(10**6)} 서울", namespace, ["고침"])
        elif roll < 0.95:
            feed.delete(rng.choice(live))
        else:
            feed.other_write()


def test_sync_under_churn_with_restarts_converges_exactly(
    stack: InprocStack, feed: FeedDouble, start_lexicon: Callable[[], Running]
) -> None:
    rng = random.Random(7)
    next_id = [0]
    churn(feed, rng, 300, next_id)
    client = stack.client()

    first = start_lexicon()
    wait_until(synced_to(client, feed.seq), "the initial snapshot")
    assert_mirrors(first, feed.docs)

    # writes while the lexicon runs, from another thread
    writer = threading.Thread(target=churn, args=(feed, random.Random(8), 400, next_id))
    writer.start()
    writer.join()
    wait_until(synced_to(client, feed.seq), "catching up with live churn")
    assert_mirrors(first, feed.docs)

    # stopped (cache saved on stop), churned, restarted: resumes from the cache's seq
    first.stop()
    saved_seq = first.lexicon.cache_state["saved_seq"]
    churn(feed, rng, 300, next_id)
    second = start_lexicon()
    assert second.lexicon.cache_state["loaded"] is True
    assert second.lexicon.cache_state["seq"] == saved_seq
    wait_until(synced_to(client, feed.seq), "catching up after a restart")
    assert_mirrors(second, feed.docs)
    assert second.lexicon.follower.stats.snapshots == 0  # resumed, no re-snapshot

    # stopped, churned past the retained history: re-snapshots, reusing unchanged documents
    second.stop()
    churn(feed, rng, 200, next_id)
    feed.forget_history()
    churn(feed, rng, 50, next_id)
    third = start_lexicon()
    wait_until(synced_to(client, feed.seq), "re-snapshot after lost history")
    assert_mirrors(third, feed.docs)
    stats = third.lexicon.follower.stats
    assert stats.snapshots == 1
    assert stats.unchanged > 0 and stats.tokenized < len(feed.docs)


def test_a_first_index_of_many_pages_serves_every_memory(
    stack: InprocStack, feed: FeedDouble, start_lexicon: Callable[[], Running]
) -> None:
    """A first index (empty index, several snapshot pages, three namespaces, writes while it
    runs) serves every memory by its own word, held in bulk arrays rather than per document."""
    memories = 5_000
    for i in range(memories):
        feed.put(f"m{i:05d}", f"기억 {i}: 부산 회의 tag{i}x", namespace=f"ns{i % 3}")
    client = stack.client()
    running = start_lexicon()
    for i in range(memories, memories + 20):  # written during the snapshot: the feed's events
        feed.put(f"m{i:05d}", f"late tag{i}x", namespace="ns0")
    feed.delete("m00003")
    wait_until(synced_to(client, feed.seq), "the first index")
    assert client.call("lexicon", "index_stats")["documents"] == len(feed.docs)
    for doc_id, doc in feed.docs.items():
        number = int(doc_id[1:])
        assert search(client, f"tag{number}x", doc["namespace"]) == [doc_id]
    assert search(client, "tag3x", "ns0") == []
    assert_mirrors(running, feed.docs)
    assert running.lexicon.follower.stats.snapshots == 1
    # the snapshot's documents are the index's bulk rows, not objects beside them
    assert len(running.lexicon.index.added) < 30


def test_restart_from_cache_skips_the_tokenizer(
    stack: InprocStack, feed: FeedDouble, start_lexicon: Callable[[], Running]
) -> None:
    for i in range(1500):
        feed.put(f"m{i:05d}", f"기억 {i}번: 부산 회의 keymem v{i}.0", keys=[f"키{i % 10}"])
    client = stack.client()
    first = start_lexicon()
    wait_until(synced_to(client, feed.seq), "the initial snapshot")
    assert first.lexicon.follower.stats.tokenized == 1500
    first.stop()

    second = start_lexicon()
    assert second.lexicon.cache_state["loaded"] is True
    assert len(second.lexicon.index) == 1500  # ready before any feed call
    wait_until(synced_to(client, feed.seq), "resume")
    assert second.lexicon.follower.stats.tokenized == 0
    assert search(client, "v1234.0")[0] == "m01234"
    assert_mirrors(second, feed.docs)


@pytest.mark.parametrize("damage", ["torn", "previous_format"])
def test_corrupt_cache_is_rebuilt_not_fatal(
    stack: InprocStack,
    feed: FeedDouble,
    start_lexicon: Callable[[], Running],
    short_home: Path,
    damage: str,
) -> None:
    for i in range(50):
        feed.put(f"m{i:03d}", f"부산 회의 {i}")
    client = stack.client()
    first = start_lexicon()
    wait_until(synced_to(client, feed.seq), "the initial snapshot")
    first.stop()
    path = cache.cache_path(short_home)
    if damage == "torn":
        raw = path.read_bytes()
        path.write_bytes(raw[: len(raw) - 7])
    else:  # what the format-2 release left, with other terms for the same ids
        stale = {f"m{i:03d}": ["stale"] for i in range(50)}
        write_format2_cache(path, stale, tokenizer=TOKENIZER_VERSION)

    second = start_lexicon()
    assert second.lexicon.cache_state["loaded"] is False
    wait_until(synced_to(client, feed.seq), "rebuild from the graph")
    assert second.lexicon.follower.stats.tokenized == 50
    assert_mirrors(second, feed.docs)


def test_replaced_database_means_a_new_snapshot(
    stack: InprocStack, feed: FeedDouble, start_lexicon: Callable[[], Running]
) -> None:
    for i in range(30):
        feed.put(f"m{i:03d}", f"부산 회의 {i}")
    client = stack.client()
    running = start_lexicon()
    wait_until(synced_to(client, feed.seq), "the initial snapshot")
    old_epoch = running.lexicon.follower.epoch
    kept = {k: v for k, v in feed.docs.items() if k < "m015"}
    kept["m999"] = {"id": "m999", "namespace": "ns", "content": "새 데이터베이스", "keys": []}
    feed.replace_database(kept)
    wait_until(lambda: running.lexicon.follower.epoch != old_epoch, "the new epoch")
    wait_until(synced_to(client, feed.seq), "the new snapshot")
    assert_mirrors(running, feed.docs)
    assert running.lexicon.follower.stats.unchanged >= 15  # unchanged text was not re-tokenized


def test_graph_down_keeps_serving_the_index(
    stack: InprocStack, start_lexicon: Callable[[], Running]
) -> None:
    running = start_lexicon()  # no graph registered at all
    client = stack.client()
    wait_until(lambda: running.lexicon.follower.stats.errors > 0, "a failed feed call")
    reply = client.call("lexicon", "search", {"query": "부산", "namespace": "ns", "min_seq": 5})
    assert reply["hits"] == [] and reply["caught_up"] is False
    stats = client.call("lexicon", "index_stats")
    assert stats["sync"]["synced"] is False and stats["sync"]["last_error"]


def test_periodic_cache_save_survives_a_crash(
    stack: InprocStack,
    feed: FeedDouble,
    start_lexicon: Callable[[], Running],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cache written in the background (not on stop) is enough to resume after a crash."""
    monkeypatch.setattr(service_module, "CACHE_SAVE_INTERVAL_S", 0.05)
    for i in range(200):
        feed.put(f"m{i:03d}", f"부산 회의 {i}")
    client = stack.client()
    first = start_lexicon()
    seq = feed.seq
    wait_until(lambda: first.lexicon.cache_state.get("saved_seq") == seq, "a background save")
    first.worker.worker.service.on_stop.clear()  # a crash: no final save
    first.stop()
    for i in range(200, 230):
        feed.put(f"m{i:03d}", f"서울 출장 {i}")
    feed.delete("m000")

    second = start_lexicon()
    assert second.lexicon.cache_state["loaded"] is True
    assert second.lexicon.cache_state["seq"] == seq
    wait_until(synced_to(client, feed.seq), "resume after the crash")
    assert_mirrors(second, feed.docs)
    assert second.lexicon.follower.stats.tokenized == 30


@pytest.mark.parametrize("tail", ["whole", "torn"])
def test_a_crash_replays_the_journal_not_the_tokenizer(
    stack: InprocStack,
    feed: FeedDouble,
    start_lexicon: Callable[[], Running],
    short_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    tail: str,
) -> None:
    """Writes applied after the last cache save come back after a crash from the journal,
    without Kiwi; a torn last record (here the delete) is left to the feed."""
    monkeypatch.setattr(service_module, "CACHE_SAVE_INTERVAL_S", 0.05)
    for i in range(100):
        feed.put(f"m{i:03d}", f"부산 회의 {i}")
    client = stack.client()
    first = start_lexicon()
    saved = feed.seq
    wait_until(lambda: first.lexicon.cache_state.get("saved_seq") == saved, "a background save")
    monkeypatch.setattr(service_module, "CACHE_SAVE_INTERVAL_S", 3600.0)
    for i in range(100, 120):
        feed.put(f"m{i:03d}", f"서울 출장 {i}")
    feed.put("m005", "제주 휴가 keymem 3.11.2")
    feed.delete("m000")
    wait_until(synced_to(client, feed.seq), "the writes after the save")
    first.worker.worker.service.on_stop.clear()  # a crash: no final save
    first.stop()
    if tail == "torn":
        journal = short_home / "lexicon" / JOURNAL_FILE
        journal.write_bytes(journal.read_bytes()[:-3])

    second = start_lexicon()
    state = second.lexicon.cache_state
    assert state["loaded"] is True and state["seq"] == saved
    if tail == "whole":
        assert state["journal_seq"] == feed.seq and state["journal_records"] == 22
    else:
        assert saved < state["journal_seq"] < feed.seq
    wait_until(synced_to(client, feed.seq), "resume after the crash")
    assert_mirrors(second, feed.docs)
    stats = second.lexicon.follower.stats
    assert stats.tokenized == 0
    assert stats.events == (0 if tail == "whole" else 1)  # the torn record: the delete
    assert search(client, "제주 휴가") == ["m005"]


def test_a_graph_off_the_feed_contract_is_an_error_not_a_crash(
    stack: InprocStack, start_lexicon: Callable[[], Running]
) -> None:
    broken = Service("graph")
    broken.add("feed_head", lambda body: {"sequence": 1})  # wrong field name
    stack.add_worker(broken)
    running = start_lexicon()
    client = stack.client()
    wait_until(lambda: running.lexicon.follower.stats.errors > 0, "the malformed reply")
    assert "KeyError" in (client.call("lexicon", "index_stats")["sync"]["last_error"] or "")
    assert search(client, "부산") == []
    assert client.call("lexicon", "ping")["pong"] is True


def test_idle_polling_reads_only_the_head(
    stack: InprocStack, feed: FeedDouble, start_lexicon: Callable[[], Running]
) -> None:
    """Caught up, the lexicon asks for the head (cheap for the graph), not for events."""
    seq = feed.put("m1", "부산 회의")
    start_lexicon()
    client = stack.client()
    wait_until(synced_to(client, seq), "the first write")
    calls = feed.since_calls
    time.sleep(0.5)  # about five idle polls
    assert feed.since_calls == calls
    seq = feed.put("m2", "서울 회의")
    wait_until(synced_to(client, seq), "the second write")
    assert feed.since_calls > calls
    assert search(client, "서울") == ["m2"]


def test_an_idle_lexicon_polls_ever_less_and_still_sees_a_write(
    stack: InprocStack, feed: FeedDouble, start_lexicon: Callable[[], Running]
) -> None:
    """Idle, each poll is a round trip through the router to the graph: they thin out to one
    every IDLE_POLL_MAX_S, and a write no read asks for is still indexed within that."""
    seq = feed.put("m1", "부산 회의")
    start_lexicon()
    client = stack.client()
    wait_until(synced_to(client, seq), "the first write")
    time.sleep(service_module.IDLE_POLL_MAX_S)  # backed off by now
    polls = feed.head_calls
    time.sleep(2 * service_module.IDLE_POLL_MAX_S)
    assert feed.head_calls - polls <= 3  # at the first poll's pace it would be 40
    seq = feed.put("m2", "서울 회의")
    written = time.monotonic()
    wait_until(synced_to(client, seq), "the second write")
    assert time.monotonic() - written < service_module.IDLE_POLL_MAX_S + 1.0


def _mapped(running: Running) -> bool:
    """Whether the worker's index is the cache file's arrays (not heap arrays it built)."""
    owner: Any = running.lexicon.index.base.ids
    while isinstance(owner, np.ndarray):
        owner = owner.base
    return isinstance(owner, memoryview) and isinstance(owner.obj, mmap.mmap)


def test_a_first_index_is_saved_at_once_and_then_served_from_the_file(
    stack: InprocStack,
    feed: FeedDouble,
    start_lexicon: Callable[[], Running],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not after the 30 s timer: a first index is saved as soon as it is complete, and the
    worker then serves the file it wrote, with the writes applied while it was written."""
    monkeypatch.setattr(service_module, "CACHE_SAVE_INTERVAL_S", 3600.0)
    for i in range(300):
        feed.put(f"m{i:03d}", f"부산 회의 {i}", namespace=f"ns{i % 2}")
    writing, release = threading.Event(), threading.Event()
    write = cache.write

    def held_write(path: Path, snap: cache.Snapshot) -> cache.CacheInfo:
        writing.set()
        assert release.wait(WAIT_S)
        return write(path, snap)

    monkeypatch.setattr(cache, "write", held_write)
    client = stack.client()
    running = start_lexicon()
    wait_until(writing.is_set, "the save of the first index")
    assert not _mapped(running)
    feed.put("m500", "제주 휴가 keymem", namespace="ns0")  # applied while the save runs
    feed.delete("m001")
    wait_until(synced_to(client, feed.seq), "the writes during the save")
    release.set()
    wait_until(lambda: _mapped(running), "serving the saved file")
    assert_mirrors(running, feed.docs)
    assert search(client, "제주 휴가", "ns0") == ["m500"]
    feed.put("m501", "서울 출장 keymem", namespace="ns1")  # and after the swap
    wait_until(synced_to(client, feed.seq), "a write after the swap")
    assert_mirrors(running, feed.docs)


def test_a_stop_right_after_a_first_index_leaves_the_cache_the_next_start_loads(
    stack: InprocStack,
    feed: FeedDouble,
    start_lexicon: Callable[[], Running],
    short_home: Path,
) -> None:
    for i in range(2_000):
        feed.put(f"m{i:04d}", f"기억 {i}: 부산 회의 tag{i}x", namespace=f"ns{i % 3}")
    client = stack.client()
    first = start_lexicon()
    wait_until(synced_to(client, feed.seq), "the first index")
    first.stop()  # whether its save is still running or not
    lexicon_dir = cache.cache_path(short_home).parent
    assert sorted(p.name for p in lexicon_dir.iterdir() if p.suffix == ".tmp") == []

    second = start_lexicon()
    assert second.lexicon.cache_state["loaded"] is True
    assert second.lexicon.cache_state["documents"] == 2_000
    wait_until(synced_to(client, feed.seq), "resume")
    assert second.lexicon.follower.stats.tokenized == 0
    assert second.lexicon.follower.stats.snapshots == 0


def test_a_stop_with_the_journal_current_does_not_rewrite_the_cache(
    stack: InprocStack, feed: FeedDouble, start_lexicon: Callable[[], Running], short_home: Path
) -> None:
    """At 1M documents a save is seconds: a stop whose changes the journal already holds
    only flushes it, and the next start replays them."""
    for i in range(100):
        feed.put(f"m{i:03d}", f"부산 회의 {i}")
    client = stack.client()
    first = start_lexicon()
    wait_until(lambda: first.lexicon.covered, "the first index saved")
    path = cache.cache_path(short_home)
    written = path.stat().st_mtime_ns
    feed.put("m100", "제주 휴가 keymem")
    wait_until(synced_to(client, feed.seq), "a write")
    first.stop()
    assert path.stat().st_mtime_ns == written

    second = start_lexicon()
    assert second.lexicon.cache_state["journal_records"] == 1
    wait_until(synced_to(client, feed.seq), "resume")
    assert second.lexicon.follower.stats.tokenized == 0
    assert_mirrors(second, feed.docs)


def test_what_a_killed_save_left_is_removed_and_never_read(
    stack: InprocStack, feed: FeedDouble, start_lexicon: Callable[[], Running], short_home: Path
) -> None:
    feed.put("m0", "부산 회의")
    path = cache.cache_path(short_home)
    path.parent.mkdir(parents=True)
    partial = path.with_name(f"{path.name}.12345.tmp")
    partial.write_bytes(b"")  # a SIGKILL right after the file was opened
    running = start_lexicon()
    assert not partial.exists()
    assert running.lexicon.cache_state["loaded"] is False
    wait_until(synced_to(stack.client(), feed.seq), "the first index")
    assert_mirrors(running, feed.docs)


def test_a_stop_during_the_first_save_waits_for_it_and_maps_nothing(
    stack: InprocStack,
    feed: FeedDouble,
    start_lexicon: Callable[[], Running],
    short_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for i in range(500):
        feed.put(f"m{i:03d}", f"부산 회의 {i}")
    writing, release = threading.Event(), threading.Event()
    write = cache.write
    loads: list[Path] = []
    load = cache.load

    def held_write(path: Path, snap: cache.Snapshot) -> cache.CacheInfo:
        writing.set()
        assert release.wait(WAIT_S)
        return write(path, snap)

    def counted_load(path: Path, index: Any, *, tokenizer: str) -> cache.CacheInfo:
        loads.append(path)
        return load(path, index, tokenizer=tokenizer)

    monkeypatch.setattr(cache, "write", held_write)
    monkeypatch.setattr(cache, "load", counted_load)
    first = start_lexicon()
    wait_until(writing.is_set, "the save of the first index")
    stopping = threading.Thread(target=first.stop)
    stopping.start()
    time.sleep(0.2)
    assert stopping.is_alive()  # the stop waits for the save in flight
    release.set()
    stopping.join(WAIT_S)
    assert not stopping.is_alive()
    assert len(loads) == 1  # the start's attempt only: a stopping worker maps nothing

    second = start_lexicon()
    assert second.lexicon.cache_state["loaded"] is True
    assert second.lexicon.cache_state["documents"] == 500


def _stream(client: Client, feed: FeedDouble, seconds: float) -> None:
    """One writer's back-to-back writes, one every 0.05 s for ``seconds``, each read back at
    once (a read-your-writes search applies the feed in the request, not the sync timer)."""
    ends = time.monotonic() + seconds
    written = 0
    while time.monotonic() < ends:
        seq = feed.put(f"w{written:04d}", f"출장 {written}")
        search_reply(client, {"query": f"출장 {written}", "namespace": "ns", "min_seq": seq})
        written += 1
        time.sleep(0.05)


@pytest.mark.parametrize("journal_bound", [False, True])
def test_a_cache_save_waits_for_the_writes_to_pause_unless_the_journal_is_long(
    stack: InprocStack,
    feed: FeedDouble,
    start_lexicon: Callable[[], Running],
    monkeypatch: pytest.MonkeyPatch,
    journal_bound: bool,
) -> None:
    """A save (at 1M a 170 MB file written and fsynced) is not made in the middle of a burst
    of writes, even when the interval since the last one has passed: it comes once the feed
    stands still. A writer that never pauses still gets one when the journal a restart would
    replay reaches its bound. The writes are applied by their reads (read-your-writes), not
    the sync timer's polls, which are slowed down here: either way the feed moved."""
    monkeypatch.setattr(service_module, "CACHE_SAVE_INTERVAL_S", 0.05)
    monkeypatch.setattr(service_module, "IDLE_POLL_S", 5.0)
    monkeypatch.setattr(service_module, "IDLE_POLL_MAX_S", 5.0)
    if journal_bound:
        monkeypatch.setattr(service_module, "JOURNAL_MAX_RECORDS", 10)
    for i in range(50):
        feed.put(f"m{i:03d}", f"부산 회의 {i}")
    client = stack.client()
    running = start_lexicon()
    first = feed.seq
    wait_until(lambda: running.lexicon.cache_state.get("saved_seq") == first, "the first save")
    _stream(client, feed, 2.0)
    saved = running.lexicon.cache_state.get("saved_seq")
    if journal_bound:
        assert saved is not None and saved > first  # the bound forced a save mid-burst
    else:
        assert saved == first
    wait_until(
        lambda: running.lexicon.cache_state.get("saved_seq") == feed.seq, "the save once still"
    )
    assert_mirrors(running, feed.docs)


def test_the_background_save_runs_nicer_than_the_serving_thread(
    stack: InprocStack,
    feed: FeedDouble,
    start_lexicon: Callable[[], Running],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A save that a burst of writes meets (it started in a pause) yields the cores to them."""
    serving = os.getpriority(os.PRIO_PROCESS, 0)  # this thread's: the in-process lexicon's too
    niceness: list[int] = []
    write = cache.write

    def observed_write(path: Path, snap: cache.Snapshot) -> cache.CacheInfo:
        niceness.append(os.getpriority(os.PRIO_PROCESS, 0))  # the calling thread's
        return write(path, snap)

    monkeypatch.setattr(cache, "write", observed_write)
    for i in range(20):
        feed.put(f"m{i:03d}", f"부산 회의 {i}")
    running = start_lexicon()
    wait_until(lambda: running.lexicon.cache_state.get("saved_seq") == feed.seq, "a save")
    step = service_module.SAVER_NICE_STEP
    assert niceness == [min(service_module.NICE_MAX, serving + step)]
    assert os.getpriority(os.PRIO_PROCESS, 0) == serving


def test_a_cache_save_is_not_started_by_the_polls_backoff_during_a_burst(
    stack: InprocStack,
    feed: FeedDouble,
    start_lexicon: Callable[[], Running],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between two polls the lexicon does not see the feed move: an idle lexicon polls up to
    2 s apart, so a burst that began after its last poll looks still. A save that is due
    asks the feed first, and waits while it moves."""
    monkeypatch.setattr(service_module, "CACHE_SAVE_INTERVAL_S", 0.05)
    monkeypatch.setattr(service_module, "IDLE_POLL_S", 1.5)  # each poll 1.5 s after the last
    monkeypatch.setattr(service_module, "IDLE_POLL_MAX_S", 1.5)
    for i in range(50):
        feed.put(f"m{i:03d}", f"부산 회의 {i}")
    running = start_lexicon()
    first = feed.seq
    wait_until(lambda: running.lexicon.cache_state.get("saved_seq") == first, "the first save")
    ends = time.monotonic() + 3.0
    written = 0
    while time.monotonic() < ends:  # writes nobody reads back: only the polls apply them
        feed.put(f"w{written:04d}", f"출장 {written}")
        written += 1
        time.sleep(0.05)
    assert running.lexicon.cache_state.get("saved_seq") == first
    wait_until(
        lambda: running.lexicon.cache_state.get("saved_seq") == feed.seq, "the save once still"
    )
    assert_mirrors(running, feed.docs)
