"""The graph after a kill -9: its worker is forked again from the parent that keeps duckdb,
numpy and the graph's modules imported (services/prefork.py) and answers within the recovery
target under load; only ever one process holds the file, the parent never; nothing
acknowledged is lost; a killed parent leaves exactly one worker behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from keymem.protocol.client import Client, with_idempotency_key
from keymem.protocol.errors import KeymemError
from keymem.services.config import Settings, load
from keymem.services.graph import GraphService, preload, service
from keymem.services.graph.requests import MAX_IDS_PER_REQUEST
from keymem.store.database import StoreLocked, graph_path
from tests.chaos.harness import NAMESPACE as LOAD_NAMESPACE
from tests.chaos.harness import RECOVERY_TARGET_S, Load, worker_pids
from tests.supervised import Deployment
from tests.vectors import remember_body

pytestmark = pytest.mark.timeout(900)

NAMESPACE = "graph-restart"
COLD_START_GIVE_UP_S = 120.0
POLL_S = 0.02
WRITERS = 2
SAVED_BEFORE_KILL = 10
HOLD_S = 1.0
SHORT_LOCK_WAIT_S = 0.3
STEADY_WRITES_MAX = 2_000

# Another process holding the graph file (as a worker that lost its parent does while it
# closes), for ``argv[2]`` seconds once it says so.
HOLDER = """
import sys, time
from pathlib import Path
from keymem.store.database import GraphStore
store = GraphStore(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(float(sys.argv[2]))
store.close()
"""


def _holders(deployment: Deployment) -> set[int]:
    """The processes of this deployment that have the graph file open."""
    path = str(graph_path(deployment.home))
    found = set()
    for process in deployment.processes():
        try:
            if any(f.path == path for f in process.open_files()):
                found.add(process.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _remember(client: Client, count: int) -> list[str]:
    """Ids of ``count`` acknowledged memories (keyed writes, as an agent's are)."""
    saved = []
    for _ in range(count):
        body = {"content": f"graph restart {uuid.uuid4().hex}", "keys": ["graph restart"]}
        reply = client.call(
            "memory", "remember", with_idempotency_key({**body, "namespace": NAMESPACE}), retry=True
        )
        saved.append(str(reply["saved"]))
    return saved


def _assert_kept(client: Client, saved: list[str], namespace: str = NAMESPACE) -> None:
    for start in range(0, len(saved), MAX_IDS_PER_REQUEST):
        ids = saved[start : start + MAX_IDS_PER_REQUEST]
        reply = client.call("graph", "get_memories", {"ids": ids, "namespace": namespace})
        assert reply["missing"] == []


@pytest.mark.supervised
def test_a_killed_worker_is_forked_again_and_answers_within_the_target(
    deployment: Deployment, client: Client
) -> None:
    saved = _remember(client, SAVED_BEFORE_KILL)
    (old,) = worker_pids(client, "graph")
    parent = psutil.Process(old).ppid()
    assert _holders(deployment) == {old}  # the parent never opens the file

    with Load(deployment.home, WRITERS) as load:
        time.sleep(1.0)  # the kill lands mid-traffic
        os.kill(old, signal.SIGKILL)
        # Within the promise: a cold start (importing duckdb and numpy) rarely is, under load.
        reply = client.call("graph", "ping", timeout_ms=int(RECOVERY_TARGET_S * 1000), retry=True)
        time.sleep(1.0)  # writes go on against the new worker

    new = reply["pid"]
    assert new != old
    assert psutil.Process(new).ppid() == parent  # forked, not started cold
    assert worker_pids(client, "graph") == [new]  # the router dropped the dead worker
    assert _holders(deployment) == {new}
    acked = [str(c.saved) for c in load.calls if c.kind == "write" and c.outcome == "ok"]
    assert acked  # the load's writes went through around the kill
    _assert_kept(client, saved)
    _assert_kept(client, acked, LOAD_NAMESPACE)


@pytest.mark.supervised
def test_a_killed_parent_leaves_exactly_one_worker_holding_the_file(
    deployment: Deployment, client: Client
) -> None:
    saved = _remember(client, SAVED_BEFORE_KILL)
    (old,) = worker_pids(client, "graph")
    parent = psutil.Process(old).ppid()
    os.kill(parent, signal.SIGKILL)
    holders_seen: list[set[int]] = []
    give_up = time.monotonic() + COLD_START_GIVE_UP_S
    while True:  # supervisord starts the parent again, which imports and forks
        holders_seen.append(_holders(deployment))
        try:
            workers = worker_pids(client, "graph")
        except KeymemError:
            workers = []
        if workers and old not in workers:
            break
        assert time.monotonic() < give_up, f"no new graph worker: {workers}"
        time.sleep(POLL_S)
    assert all(len(holders) <= 1 for holders in holders_seen), holders_seen
    (new,) = workers
    assert psutil.Process(new).ppid() != parent
    assert not psutil.pid_exists(old) or psutil.Process(old).status() == psutil.STATUS_ZOMBIE
    assert _holders(deployment) == {new}
    _assert_kept(client, saved)


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Settings, subprocess.Popen[str]]]:
    """A home whose graph file another process holds for ``HOLD_S``, and that process."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(graph_path(tmp_path)), str(HOLD_S)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield Settings.from_config(load({}, home=tmp_path)), holder
    finally:
        holder.kill()
        holder.wait()


def test_a_starting_graph_waits_for_the_file_another_process_lets_go_of(
    held: tuple[Settings, subprocess.Popen[str]],
) -> None:
    settings, holder = held
    built = preload(settings)()  # while the holder still has the file
    try:
        assert holder.wait(timeout=HOLD_S) == 0  # it had the file until it was done
        assert built.name == "graph"
    finally:
        for close in built.on_stop:
            close()


def test_a_file_held_past_the_wait_is_a_typed_error(
    held: tuple[Settings, subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, _ = held
    monkeypatch.setattr(service, "LOCK_WAIT_S", SHORT_LOCK_WAIT_S)
    with pytest.raises(StoreLocked):
        preload(settings)()


def test_steady_writes_keep_the_log_a_restart_replays_small(tmp_path: Path) -> None:
    """Writes that never leave the graph idle are still checkpointed once the write-ahead log
    is large, so a kill -9 under load leaves little to replay at the next start."""
    graph = GraphService(graph_path(tmp_path))
    saved = []
    try:
        for n in range(STEADY_WRITES_MAX):
            body = remember_body(f"steady write {n}", ["steady writes", f"writer {n % 4}"])
            saved.append(graph.remember(body)["saved"])
            graph.flush_due()  # as the worker's timer folds the logged writes into the file
            if graph.replay_s() >= graph.replay_budget_s:
                break
        assert graph.replay_s() >= graph.replay_budget_s, "the log never grew"
        graph.checkpoint_due()  # as the worker's timer calls it, the last write just now
        assert graph.replay_s() < service.WAL_REPLAY_S_PER_COMMIT  # an empty log, or nearly
        # the next budget is what that checkpoint cost, in seconds of replay
        assert graph.replay_budget_s >= service.WAL_REPLAY_MIN_S
    finally:
        graph.close()
    reopened = GraphService(graph_path(tmp_path))
    try:
        assert reopened.get_memories({"ids": saved})["missing"] == []
    finally:
        reopened.close()
