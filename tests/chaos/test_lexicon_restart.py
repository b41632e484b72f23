"""The lexicon after a kill -9: its worker is forked again from the process that keeps Kiwi
loaded (services/prefork.py), answers within the recovery target, answers as before, and its
index holds every memory the graph has; a killed parent leaves exactly one worker behind.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from typing import Any

import psutil
import pytest

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError
from tests.chaos.harness import RECOVERY_TARGET_S, Load, worker_pids
from tests.supervised import Deployment

pytestmark = [pytest.mark.supervised, pytest.mark.timeout(900)]

NAMESPACE = "lexicon-restart"
# Written during the restart, apart: more memories in NAMESPACE would change its BM25 scores.
LATER_NAMESPACE = "lexicon-restart-later"
COLD_START_GIVE_UP_S = 180.0  # a killed parent reloads Kiwi: minutes on a loaded machine
POLL_S = 0.05
WRITERS = 2
# Queries whose answers must not change across a restart (Korean goes through Kiwi).
QUERIES = ("부산에서 회의", "딸기를 좋아한다", "keymem 3.11.2 lexicon.py", "東京都")
KEY_TEXT = "사용자는 어제 부산에서 회의를 했다. The keymem lexicon uses Kiwi for Korean."


Saved = dict[str, tuple[str, str]]  # word -> (namespace, memory id)


def _remember(client: Client, words: list[str], namespace: str = NAMESPACE) -> Saved:
    """One memory per word (its only distinctive term)."""
    saved = {}
    for word in words:
        reply = client.call(
            "memory",
            "remember",
            {"content": f"note about {word}", "keys": [word], "namespace": namespace},
            retry=True,
        )
        saved[word] = (namespace, str(reply["saved"]))
    return saved


def _answers(client: Client) -> dict[str, Any]:
    """What the lexicon answers to fixed questions over the memories written so far."""
    searches = {
        q: client.call(
            "lexicon", "search", {"query": q, "namespace": NAMESPACE, "top_n": 50}, retry=True
        )
        for q in QUERIES
    }
    return {
        "search": {q: (r["tokens"], r["hits"]) for q, r in searches.items()},
        "keys": client.call("lexicon", "extract_keys", {"text": KEY_TEXT}, retry=True)["keys"],
    }


def _caught_up(client: Client) -> None:
    """Wait until the lexicon's index reflects the graph's change feed as of now."""
    head = int(client.call("graph", "feed_head", {})["seq"])
    give_up = time.monotonic() + COLD_START_GIVE_UP_S
    while True:
        sync = client.call("lexicon", "index_stats", {}, retry=True)["sync"]
        if sync["phase"] == "live" and sync["seq"] >= head:
            return
        assert time.monotonic() < give_up, f"the lexicon did not catch up to seq {head}: {sync}"
        time.sleep(POLL_S)


def _assert_indexed(client: Client, saved: Saved) -> None:
    _caught_up(client)
    missing = []
    for word, (namespace, memory_id) in saved.items():
        reply = client.call(
            "lexicon", "search", {"query": word, "namespace": namespace}, retry=True
        )
        if memory_id not in [hit["id"] for hit in reply["hits"]]:
            missing.append(word)
    assert not missing, f"memories missing from the lexicon's index: {missing}"


def _words(n: int) -> list[str]:
    return [f"w{uuid.uuid4().hex[:12]}" for _ in range(n)]


def test_a_killed_worker_is_forked_again_answers_at_once_and_the_same(
    deployment: Deployment, client: Client
) -> None:
    saved = _remember(client, [*_words(20), "부산에서", "딸기를"])
    _caught_up(client)
    before = _answers(client)
    (old,) = worker_pids(client, "lexicon")
    parent = psutil.Process(old).ppid()
    kiwi_before = client.call("lexicon", "index_stats", {})["kiwi"]

    with Load(deployment.home, WRITERS):
        time.sleep(1.0)  # the kill lands mid-traffic
        os.kill(old, signal.SIGKILL)
        # Answered within the promise: a cold start (Kiwi's ~3 s of CPU alone) could not.
        reply = client.call("lexicon", "ping", timeout_ms=int(RECOVERY_TARGET_S * 1000), retry=True)
        later = _remember(client, _words(10), LATER_NAMESPACE)  # while the worker catches up

    assert reply["pid"] != old
    assert worker_pids(client, "lexicon") == [reply["pid"]]  # the router dropped the dead worker
    assert psutil.Process(reply["pid"]).ppid() == parent  # forked, not started cold
    assert client.call("lexicon", "index_stats", {})["kiwi"] == kiwi_before  # Kiwi not reloaded
    _caught_up(client)
    assert _answers(client) == before
    _assert_indexed(client, saved | later)


def test_a_killed_parent_leaves_exactly_one_worker(deployment: Deployment, client: Client) -> None:
    saved = _remember(client, _words(5))
    (old,) = worker_pids(client, "lexicon")
    parent = psutil.Process(old).ppid()
    os.kill(parent, signal.SIGKILL)
    give_up = time.monotonic() + COLD_START_GIVE_UP_S
    while True:  # supervisord starts the parent again, which loads Kiwi and forks
        try:
            workers = worker_pids(client, "lexicon")
        except KeymemError:
            workers = []
        if workers and old not in workers:
            break
        assert time.monotonic() < give_up, f"no new lexicon worker: {workers}"
        time.sleep(POLL_S)
    assert not psutil.pid_exists(old) or psutil.Process(old).status() == psutil.STATUS_ZOMBIE
    (new,) = workers
    assert psutil.Process(new).ppid() != parent
    _assert_indexed(client, saved)
