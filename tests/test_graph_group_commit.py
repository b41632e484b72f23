"""Concurrent writers share transactions (group commit) without sharing each other's errors."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from keymem.protocol.errors import BadRequest
from keymem.services.graph import make_service
from keymem.services.stack import InprocStack
from tests.graph_helpers import open_graph

WRITERS = 6
WRITES_EACH = 30


def test_concurrent_writes_commit_in_groups_and_errors_stay_per_request(
    stack: InprocStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = open_graph(tmp_path)
    commits: list[int] = []
    original = graph.store.append

    def counting_append(changes: Any, head_seq: int) -> int:
        commits.append(len(changes.new_memories))
        return original(changes, head_seq)

    monkeypatch.setattr(graph.store, "append", counting_append)
    stack.add_worker(make_service(graph))
    clients = [stack.client(timeout_ms=20_000) for _ in range(WRITERS)]
    acked: list[list[str]] = [[] for _ in range(WRITERS)]
    errors: list[list[str]] = [[] for _ in range(WRITERS)]
    seqs: list[list[int]] = [[] for _ in range(WRITERS)]
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((WRITERS, WRITES_EACH, 2, 512)).astype(np.float32)

    def write(writer: int) -> None:
        for i in range(WRITES_EACH):
            body: dict[str, Any] = {
                "content": f"writer {writer} fact {i}",
                "keys": [f"writer {writer}", "shared topic"],
                "key_vectors": vectors[writer, i],
            }
            if i % 10 == 9:
                body["decay_profile"] = "sometimes"  # invalid: this request alone must fail
            try:
                reply = clients[writer].call("graph", "remember", body)
            except BadRequest as exc:
                errors[writer].append(str(exc))
                continue
            acked[writer].append(reply["saved"])
            seqs[writer].append(reply["seq"])

    threads = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    expected_ok = WRITES_EACH - WRITES_EACH // 10
    assert [len(a) for a in acked] == [expected_ok] * WRITERS
    assert [len(e) for e in errors] == [WRITES_EACH // 10] * WRITERS
    assert all(s == sorted(s) and len(set(s)) == len(s) for s in seqs)  # read-your-writes seqs
    everything = [m for a in acked for m in a]
    found = clients[0].call("graph", "get_memories", {"ids": everything})
    assert found["missing"] == []
    assert sum(commits) == len(everything)
    assert len(commits) < len(everything)  # at least some requests shared a transaction
    graph.close()
    reopened = open_graph(tmp_path)
    try:
        assert set(everything) <= set(reopened.state.memories)
    finally:
        reopened.close()
