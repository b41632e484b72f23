"""Durability with real processes: kill -9 the graph service under a stream of writes.

The graph runs as ``python -m keymem.services graph`` (what supervisord starts), a separate writer
process streams ``remember`` calls through the router and prints each id only once the reply
arrived, i.e. once the graph acknowledged it. After SIGKILL and a restart every acknowledged
id must be readable, and the file must open and take writes again. The router is a Broker
thread in the test process on the same ipc endpoints a deployment uses.

Nothing here measures how fast a death is noticed (kill -9 closes the connection, which the
router sees at once), so the graph and the router run the shipped heartbeat, and a start is
given CPU time rather than wall time: on a box at load 20+ a test-speed liveness of 0.3 s
dropped a starved graph, and a graph at nice 10 took 39 s of wall time (under 1 s of CPU)
to register.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import psutil
import pytest

from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints, prepare_run_dir
from keymem.protocol.errors import Conflict, KeymemError
from keymem.services.catalog import STOP_WAIT_S
from keymem.services.cli import doctor
from keymem.services.config import Settings, load
from keymem.services.stack import InprocStack
from keymem.store.backup import backup_dir
from keymem.store.database import GraphStore
from keymem.store.schema import SCHEMA_VERSION, DamagedMeta
from keymem.store.writelog import HEADER, UnreadableLog, log_path
from tests.graph_helpers import GRAPH_FILE, damage_file, open_graph, table_counts
from tests.vectors import remember_body

ACKS_BEFORE_KILL = 150
# A graph start costs a few seconds of CPU; what it gets of a loaded box's is not ours to know.
START_CPU_S = 30.0
START_WALL_BACKSTOP_S = 600.0  # only a graph that spends no CPU and never answers ends here

WRITER = r"""
import sys, numpy as np
from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError
rng = np.random.default_rng(7)
client = Client(sys.argv[1], timeout_ms=3000)
vocabulary = [f"topic {i}" for i in range(40)]
i = 0
while True:
    keys = list(rng.choice(vocabulary, size=3, replace=False))
    vectors = rng.standard_normal((3, 512)).astype(np.float32)
    try:
        reply = client.call("graph", "remember", {
            "content": f"durable write {i}", "keys": keys, "key_vectors": vectors,
            "namespace": "durability"})
    except KeymemError:
        continue
    print(reply["saved"], flush=True)
    i += 1
"""


def _env(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "KEYMEM_HOME": str(home),
        "KEYMEM_TRANSPORT": "ipc",
        "KEYMEM_LOG_LEVEL": "WARNING",
    }


def _start_graph(home: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "keymem.services", "graph"],
        env=_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _cpu_s(process: subprocess.Popen[bytes]) -> float:
    """CPU seconds the graph (its prefork parent and worker) has used so far."""
    try:
        root = psutil.Process(process.pid)
        tree = [root, *root.children(recursive=True)]
        return sum(p.cpu_times().user + p.cpu_times().system for p in tree)
    except psutil.NoSuchProcess:
        return 0.0


def _wait_ready(client: Client, process: subprocess.Popen[bytes]) -> None:
    give_up = time.monotonic() + START_WALL_BACKSTOP_S
    while time.monotonic() < give_up and _cpu_s(process) < START_CPU_S:
        if process.poll() is not None:
            stderr = process.stderr.read().decode() if process.stderr else ""
            raise AssertionError(f"graph exited with {process.returncode}: {stderr[-2000:]}")
        try:
            client.call("graph", "ping", timeout_ms=500)
            return
        except KeymemError:
            time.sleep(0.05)
    raise AssertionError(f"graph service did not register ({_cpu_s(process):.1f} s of CPU spent)")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, and SIGKILL only if the graph's own bounded stop is overrun."""
    process.terminate()
    try:
        process.wait(STOP_WAIT_S["graph"])
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture
def router(short_home: Path) -> Iterator[InprocStack]:
    endpoints = ipc_endpoints(short_home)
    prepare_run_dir(endpoints)
    with InprocStack(endpoints=endpoints) as stack:
        yield stack


def test_every_acknowledged_write_survives_kill_9(router: InprocStack, short_home: Path) -> None:
    client = router.client(timeout_ms=5_000)
    graph = _start_graph(short_home)
    writer: subprocess.Popen[str] | None = None
    try:
        _wait_ready(client, graph)
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, router.endpoints.frontend],
            env=_env(short_home),
            stdout=subprocess.PIPE,
            text=True,
        )
        acked: list[str] = []
        enough = threading.Event()

        def collect() -> None:
            assert writer is not None and writer.stdout is not None
            for line in writer.stdout:
                acked.append(line.strip())
                if len(acked) >= ACKS_BEFORE_KILL:
                    enough.set()

        reader = threading.Thread(target=collect, daemon=True)
        reader.start()
        assert enough.wait(60), f"only {len(acked)} writes acknowledged"
        graph.send_signal(signal.SIGKILL)  # mid-stream: the writer is still sending
        graph.wait(10)
        time.sleep(0.5)  # the writer sees failures now; none of them may count
        writer.kill()
        writer.wait(10)
        reader.join(5)
        survivors = list(acked)

        graph = _start_graph(short_home)
        _wait_ready(client, graph)
        missing: list[str] = []
        for start in range(0, len(survivors), 1000):
            reply = client.call(
                "graph",
                "get_memories",
                {"ids": survivors[start : start + 1000], "namespace": "durability"},
            )
            missing += reply["missing"]
        assert missing == [], f"{len(missing)} of {len(survivors)} acknowledged writes lost"
        counts = client.call("graph", "counts", {"namespace": "durability"})
        assert counts["memories"] >= len(survivors)
        after = client.call(
            "graph",
            "remember",
            {
                "content": "written after the restart",
                "keys": ["after restart"],
                "key_vectors": np.ones((1, 512), dtype=np.float32),
                "namespace": "durability",
            },
        )
        assert after["seq"] > counts["seq"]
    finally:
        if writer is not None and writer.poll() is None:
            writer.kill()
        _stop(graph)


def test_backup_and_export_go_through_the_running_service(
    router: InprocStack, short_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from keymem.services.cli import main

    client = router.client(timeout_ms=5_000)
    graph = _start_graph(short_home)
    try:
        _wait_ready(client, graph)
        saved = client.call(
            "graph",
            "remember",
            {
                "content": "backed up while running",
                "keys": ["running backup"],
                "key_vectors": np.ones((1, 512), dtype=np.float32),
            },
        )["saved"]
        monkeypatch.setenv("KEYMEM_HOME", str(short_home))
        assert main(["backup"]) == 0  # the file is locked by the service: it takes the copy
        assert len(list((short_home / "backups").glob("graph-*.duckdb"))) == 1
        out = tmp_path / "running.json"
        assert main(["export", str(out)]) == 0
        assert saved in out.read_text()
        assert main(["import", str(out)]) == 1  # needs the service stopped
        client.call("graph", "ping")  # and the service is still serving
    finally:
        _stop(graph)


def _newer_schema(path: Path) -> None:
    conn = duckdb.connect(str(path))
    conn.execute(
        "UPDATE meta SET value = ? WHERE name = 'schema_version'", [str(SCHEMA_VERSION + 1)]
    )
    conn.close()


def _unreadable_log(path: Path) -> None:
    payload = bytes([99]) + b"a record of a format this keymem does not know"
    with log_path(path).open("ab") as log:
        log.write(HEADER.pack(len(payload), zlib.crc32(payload)) + payload)


@pytest.mark.parametrize(
    ("damage", "error"), [(_newer_schema, Conflict), (_unreadable_log, UnreadableLog)]
)
def test_a_failed_open_leaves_the_file_to_the_next_opener(
    tmp_path: Path, damage: Any, error: type[KeymemError]
) -> None:
    """Both fail after DuckDB's connect: the store must let go of the file and its log."""
    path = tmp_path / "graph.duckdb"
    GraphStore(path).close()
    damage(path)
    with pytest.raises(error) as failed:  # its traceback keeps the half-opened store alive
        GraphStore(path)
    held = [f.path for f in psutil.Process().open_files() if f.path.startswith(str(tmp_path))]
    assert held == [], failed.value
    opener = "import duckdb, sys; duckdb.connect(sys.argv[1]).close()"
    subprocess.run([sys.executable, "-c", opener, str(path)], check=True, timeout=60)
    duckdb.connect(str(path), read_only=True).close()  # and this process, as `keymem doctor`


@pytest.mark.parametrize(
    ("row", "value"),
    [
        ("dim", "not a number"),
        ("pruned_through", "12abc"),
        ("log_applied", "-3"),
        ("slept_at", "nan"),
        ("schema_version", "v8?"),
    ],
)
def test_a_damaged_meta_number_is_a_typed_error_that_changes_nothing(
    tmp_path: Path, row: str, value: str
) -> None:
    """The graph's start fails with ``DamagedMeta`` naming the row (not a bare ValueError),
    leaves the file as it was and lets go of it, and ``keymem doctor`` names the row and the
    backup to restore; once the row is repaired (as it was, or gone) the service starts again
    in this process."""
    path = tmp_path / GRAPH_FILE
    graph = open_graph(tmp_path)
    graph.remember(remember_body("A memory that must survive", ["survival"]))
    graph.close()
    sound = meta_rows(path)
    damage_file(path, [("INSERT OR REPLACE INTO meta VALUES (?, ?)", [row, value])])
    before = (table_counts(path), meta_rows(path))
    with pytest.raises(DamagedMeta) as failed:  # its traceback keeps the half-started service
        open_graph(tmp_path)
    assert failed.value.detail == {"row": row, "value": value}
    assert repr(row) in failed.value.message and repr(value) in failed.value.message
    held = [f.path for f in psutil.Process().open_files() if f.path.startswith(str(tmp_path))]
    assert held == [], failed.value
    assert (table_counts(path), meta_rows(path)) == before
    (check,) = doctor._schema(Settings.from_config(load({}, home=tmp_path)))
    assert check.status == "fail" and repr(row) in check.detail and repr(value) in check.detail
    assert str(backup_dir(tmp_path)) in check.fix
    repair = [("INSERT INTO meta VALUES (?, ?)", list(r)) for r in sound if r[0] == row]
    damage_file(path, [("DELETE FROM meta WHERE name = ?", [row]), *repair])
    graph = open_graph(tmp_path)
    try:
        assert [m.content for m in graph.state.memories.values()] == ["A memory that must survive"]
    finally:
        graph.close()


def meta_rows(path: Path) -> list[tuple[Any, ...]]:
    conn = duckdb.connect(str(path), read_only=True)
    try:
        return conn.execute("SELECT name, value FROM meta ORDER BY name").fetchall()
    finally:
        conn.close()
