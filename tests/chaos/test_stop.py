"""A stop finishes what a kill would leave half-written, within bounds that agree.

supervisord SIGKILLs a program that has not stopped within its ``stopwaitsecs``; the graph's
stop lets a backup it has begun finish (up to GRAPH_BACKUP_WAIT_AT_STOP_S, a backup being
minutes at 1M) and then folds its write-behind log; ``keymem down`` waits for all of it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import duckdb
import numpy as np
import pytest

from benchmarks.graph_bench import DIM, NAMESPACES, vocabulary_size
from benchmarks.scale_store import bulk_store
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.services.catalog import (
    CLOSE_BUDGET_S,
    GRAPH_BACKUP_WAIT_AT_STOP_S,
    stop_wait_s,
)
from keymem.services.cli import down
from keymem.services.config import Settings
from keymem.services.embedder.backends.base import fingerprint
from keymem.services.graph import GraphService
from keymem.services.supervision import SHUTDOWN_TIMEOUT_S, Supervision
from keymem.store.backup import BACKUP_SUFFIX, backup_dir, start_backup
from keymem.store.database import graph_path
from tests.full_stack import embedding_model
from tests.supervised import running_deployment

# A store whose backup takes a good fraction of a second even on a fast machine.
MEMORIES = 5_000
ABANDON_WITHIN_S = 2.0


def _store(home: Path, memories: int = MEMORIES) -> None:
    vocab = vocabulary_size(memories)
    raw = np.random.default_rng(0).standard_normal((NAMESPACES, vocab, DIM)).astype(np.float32)
    table = raw / np.linalg.norm(raw, axis=2, keepdims=True)
    # recorded as the deployed embedder's vectors, so `keymem up` serves the store as it is
    bulk_store(home, memories, table, fingerprint(embedding_model()))


def _memories_in(path: Path) -> int:
    with duckdb.connect(str(path), read_only=True) as conn:
        row = conn.execute("SELECT count(*) FROM memories").fetchone()
    assert row is not None
    return int(row[0])


def test_down_lets_a_running_backup_finish_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_deployment(prepare=_store) as deployed:
        for name, value in deployed.env.items():
            monkeypatch.setenv(name, value)
        supervision = Supervision(Settings.from_env())
        told = {
            c["name"]: c["stopwaitsecs"] for c in supervision.rpc().supervisor.getAllConfigInfo()
        }
        assert told["graph"] >= GRAPH_BACKUP_WAIT_AT_STOP_S + CLOSE_BUDGET_S
        assert all(told[name] == int(stop_wait_s(name)) for name in told)
        assert max(told.values()) < SHUTDOWN_TIMEOUT_S  # down outwaits every program's stop

        with Client(ipc_endpoints(deployed.home).frontend, timeout_ms=10_000) as client:
            started = client.call("graph", "backup", {})
        assert started["status"] == "running"
        assert down.run(argparse.Namespace()) == 0

        said = capsys.readouterr().out
        assert f"taking a backup ({started['path']})" in said
        assert said.strip().splitlines()[-1].startswith("keymem stopped")
        backup = Path(started["path"])
        assert _memories_in(backup) == MEMORIES  # finished, not killed half-way
        assert not list(backup.parent.glob("*.partial"))


def test_a_backup_still_running_past_the_bound_is_abandoned_cleanly(short_home: Path) -> None:
    _store(short_home)
    graph = GraphService(graph_path(short_home))
    graph.backup_job = job = start_backup(graph.store, backup_dir(short_home))
    stopping = time.monotonic()
    graph.finish_backups(timeout_s=0.0)
    assert time.monotonic() - stopping < ABANDON_WITHIN_S
    assert job.status == "failed"
    graph.close()
    assert not list(backup_dir(short_home).glob(f"*{BACKUP_SUFFIX}*"))  # no partial file
    assert _memories_in(graph_path(short_home)) == MEMORIES
