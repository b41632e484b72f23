"""The real deployment: supervisord running the five programs, driven through the CLI."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from keymem.protocol import envelope
from keymem.protocol.calls import REPLY_GRACE_MS
from keymem.protocol.client import Client
from keymem.protocol.codec import pack
from keymem.protocol.endpoints import ipc_endpoints
from keymem.protocol.errors import KeymemError
from keymem.services.catalog import placement
from keymem.services.config import ALL_PROGRAMS, WORKER_SERVICES, load
from keymem.store.database import graph_path
from tests.supervised import Deployment, deployment_env

pytestmark = pytest.mark.supervised

CALL_DEADLINE_MS = 1_000
RESTART_TIMEOUT_S = 30


@pytest.fixture
def deployment(short_home: Path) -> Iterator[Deployment]:
    deployed = Deployment(short_home, deployment_env(short_home))
    yield deployed
    deployed.keymem("down", check=False)


@pytest.fixture(scope="module")
def running() -> Iterator[Deployment]:
    """One deployment shared by the tests that only need keymem up (each leaves it healthy):
    starting the real services costs seconds of model loading."""
    home = Path(tempfile.mkdtemp(prefix="km-", dir="/tmp"))
    deployed = Deployment(home, deployment_env(home))
    deployed.keymem("up")
    deployed.wait_all_running()
    try:
        yield deployed
    finally:
        deployed.keymem("down", check=False)
        shutil.rmtree(home, ignore_errors=True)


def frontend(deployment: Deployment) -> str:
    return ipc_endpoints(deployment.home).frontend


def test_up_status_down_leaves_nothing_behind(deployment: Deployment) -> None:
    up = deployment.keymem("up")
    assert "all services ready" in up.stdout
    report = deployment.wait_all_running()
    assert report["running"] and list(report["services"]) == list(ALL_PROGRAMS)
    for name, service in report["services"].items():
        assert service["workers"] == 1, name
        assert Path(service["log"]).is_file(), name
        assert service["errors"] == 0, name  # up's readiness probes are not errors
    with Client(frontend(deployment)) as client, pytest.raises(KeymemError):
        client.call("graph", "no_such_method")
    assert deployment.status()["services"]["graph"]["errors"] == 1  # a real one is counted
    text = deployment.keymem("status").stdout
    for name in ALL_PROGRAMS:
        assert name in text and "RUNNING" in text
    started = deployment.processes()
    programs = placement(load(deployment.env, home=deployment.home))
    assert len(started) >= 1 + len(programs)  # supervisord and its programs

    down = deployment.keymem("down")
    assert "stopped" in down.stdout
    assert deployment.processes() == []
    assert not any(p.is_running() and p.status() != "zombie" for p in started)
    assert list((deployment.home / "run").glob("*.sock")) == []
    stopped = deployment.keymem("status", check=False)
    assert stopped.returncode == 3 and "stopped" in stopped.stdout
    assert "not running" in deployment.keymem("down").stdout


def test_concurrent_ups_start_exactly_one_supervisord(deployment: Deployment) -> None:
    launches = [
        subprocess.Popen(
            [sys.executable, "-m", "keymem.services.cli", "up"],
            env=deployment.env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [launch.communicate(timeout=120)[0] for launch in launches]
    assert [launch.returncode for launch in launches] == [0, 0, 0]
    assert sum("already running" in out for out in outputs) == 2
    supervisords = [p for p in deployment.processes() if "supervisord" in " ".join(p.cmdline())]
    assert len(supervisords) == 1


def test_up_reports_a_service_that_cannot_start_with_its_log(deployment: Deployment) -> None:
    # settings are checked before anything starts; a graph file that is not one stops the graph
    graph_path(deployment.home).write_bytes(b"not a graph")
    result = deployment.keymem("up", "--timeout", "60", check=False)
    assert result.returncode == 1
    assert "did not become ready" in result.stderr
    assert "- graph does not answer (supervisor: " in result.stderr
    assert str(deployment.home / "logs" / "graph.log") in result.stderr


def test_a_bad_setting_is_one_clear_line_not_a_traceback(deployment: Deployment) -> None:
    broken = Deployment(deployment.home, {**deployment.env, "KEYMEM_TRANSPORT": "carrier-pigeon"})
    result = broken.keymem("up", check=False)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "keymem: configuration error: KEYMEM_TRANSPORT must be ipc or tcp, got 'carrier-pigeon'"
    )


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("KEYMEM_LEARN_TTL_S", "soon"),
        ("KEYMEM_LEARN_TTL_S", "0"),
        ("KEYMEM_LEARN_TTL_S", "-5"),
        ("KEYMEM_INJECT_MIN_RELEVANCE", "high"),
    ],
)
def test_an_unusable_router_setting_stops_it_with_one_clear_line(variable: str, value: str) -> None:
    """Exit 78 (a configuration error supervisord leaves down), not a traceback, a restart
    loop, a router that learns with a nonsense window or fails every inject."""
    home = Path(tempfile.mkdtemp(prefix="km-", dir="/tmp"))  # ipc paths must stay short
    try:
        env = {**os.environ, "KEYMEM_HOME": str(home), variable: value}
        result = subprocess.run(
            [sys.executable, "-m", "keymem.services", "router"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert result.returncode == 78
    assert result.stderr.strip().startswith(f"keymem router: configuration error: {variable}")


class Caller(threading.Thread):
    """Calls one service's ping in a loop, recording each outcome and how long it took."""

    def __init__(self, endpoint: str, service: str) -> None:
        super().__init__(daemon=True)
        self.endpoint, self.service = endpoint, service
        self.outcomes: list[tuple[str, float]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        with Client(self.endpoint, context=zmq.Context()) as client:
            while not self.halt.is_set():
                started = time.monotonic()
                try:
                    client.call(self.service, "ping", timeout_ms=CALL_DEADLINE_MS)
                    outcome = "ok"
                except KeymemError as exc:
                    outcome = exc.code.value
                self.outcomes.append((outcome, time.monotonic() - started))
                time.sleep(0.01)


def _router_stats(endpoint: str) -> dict[str, Any]:
    with Client(endpoint, timeout_ms=CALL_DEADLINE_MS) as client:
        stats: dict[str, Any] = client.call("router", "stats")
        return stats


def _wait_for(predicate: Any, what: str) -> None:
    give_up = time.monotonic() + RESTART_TIMEOUT_S
    while True:
        try:
            if predicate():
                return
        except KeymemError:
            pass
        assert time.monotonic() < give_up, f"timed out waiting for {what}"
        time.sleep(0.1)


def _serving_pid(endpoint: str, name: str) -> int:
    """The process that answers for ``name``: the supervised one, except for a preforked
    service (the lexicon), whose supervised parent only forks the worker that serves."""
    stats = _router_stats(endpoint)
    if name == "router":
        pid: int = stats["router"]["pid"]
        return pid
    (worker,) = stats["services"][name]["workers"]
    pid = worker["pid"]
    return pid


def _every_service_has_one_worker(endpoint: str) -> bool:
    services = _router_stats(endpoint)["services"]
    return all(len(services[name]["workers"]) == 1 for name in WORKER_SERVICES)


@pytest.mark.parametrize("victim", ALL_PROGRAMS)
def test_kill_9_is_restarted_routed_again_and_nothing_hangs(
    running: Deployment, victim: str
) -> None:
    endpoint = frontend(running)
    old_pid = _serving_pid(endpoint, victim)
    caller = Caller(endpoint, victim)
    caller.start()
    time.sleep(0.2)
    os.kill(old_pid, signal.SIGKILL)

    def restarted() -> bool:
        if victim == "router":
            stats = _router_stats(endpoint)
            return stats["router"]["pid"] != old_pid and _every_service_has_one_worker(endpoint)
        workers = _router_stats(endpoint)["services"][victim]["workers"]
        return [w["pid"] for w in workers] not in ([], [old_pid])

    _wait_for(restarted, f"{victim} to come back")
    mark = len(caller.outcomes)  # a call may still be waiting out one lost in the crash
    _wait_for(
        lambda: any(o == "ok" for o, _ in caller.outcomes[mark:]),
        f"a call answered by the restarted {victim}",
    )
    caller.halt.set()
    caller.join(5)

    new_pid = _serving_pid(endpoint, victim)
    assert new_pid != old_pid
    outcomes = {outcome for outcome, _ in caller.outcomes}
    assert outcomes <= {"ok", "unavailable", "timeout"}
    slowest = max(elapsed for _, elapsed in caller.outcomes)
    assert slowest < (CALL_DEADLINE_MS + REPLY_GRACE_MS) / 1000 + 0.5, "a call hung"
    if victim != "router":
        # the router noticed the dead worker: a call it held was answered `unavailable`, not
        # left to time out (a forked lexicon worker is back before the caller's next call, so
        # every outcome may be `ok`)
        assert "timeout" not in outcomes
        workers = _router_stats(endpoint)["services"][victim]["workers"]
        assert [w["pid"] for w in workers] == [new_pid]


def _garbage(rng: random.Random) -> list[bytes]:
    """One malformed or hostile multipart message."""

    def blob(limit: int = 64) -> bytes:
        return rng.randbytes(rng.randint(0, limit))

    deadline = (envelope.now_ms() + 1000).to_bytes(8, "big")
    request = envelope.header(envelope.REQUEST)
    shapes = [
        lambda: [blob() for _ in range(rng.randint(1, 8))],
        lambda: [envelope.header(rng.choice(b"QRWHDX").to_bytes(1, "big")), blob(), blob()],
        lambda: [b"KMP\x09Q", b"id", b"embedder", b"ping", deadline, b""],
        lambda: [request, b"id", b"embedder", b"ping", deadline, blob()],
        lambda: [request, b"id", blob(8), blob(8), deadline, blob()],
        lambda: [request, b"id", b"graph", b"no_such_method", deadline, pack({"x": 1})],
        lambda: [envelope.header(envelope.READY), blob()],
        lambda: [envelope.header(envelope.HEARTBEAT), blob()],
        lambda: [envelope.header(envelope.REPLY), blob(8), b"ok", blob()],
        lambda: [request, b"id", b"lexicon", b"ping", deadline[:5], b""],
    ]
    return rng.choice(shapes)()


def test_fuzzing_every_socket_leaves_every_service_up(running: Deployment) -> None:
    endpoint = frontend(running)
    pids_before = {n: s["pid"] for n, s in running.status()["services"].items()}
    serving_before = {n: _serving_pid(endpoint, n) for n in ALL_PROGRAMS}
    stats = _router_stats(endpoint)
    targets = [endpoint, ipc_endpoints(running.home).backend]
    targets += [w["direct"] for n in WORKER_SERVICES for w in stats["services"][n]["workers"]]
    assert len(targets) == 2 + len(WORKER_SERVICES)
    rng = random.Random(20261129)
    context = zmq.Context()
    for target in targets:
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(target)
        for _ in range(1500):
            sock.send_multipart(_garbage(rng))
        huge = [
            envelope.header(envelope.REQUEST),
            b"big",
            b"graph",
            b"ping",
            (envelope.now_ms() + 1000).to_bytes(8, "big"),
            b"\0" * (20 * 2**20),
        ]
        sock.send_multipart(huge)
        time.sleep(0.3)
        sock.close()
    context.term()

    with Client(endpoint, timeout_ms=CALL_DEADLINE_MS) as client:
        for name in WORKER_SERVICES:
            assert client.call(name, "ping")["pong"] is True
    after = running.status()["services"]
    assert {n: s["pid"] for n, s in after.items()} == pids_before  # nothing crashed
    assert {n: _serving_pid(endpoint, n) for n in ALL_PROGRAMS} == serving_before  # nor forked
    assert _router_stats(endpoint)["router"]["malformed"] > 0


def test_bench_measures_router_and_direct_paths(running: Deployment) -> None:
    import json

    result = running.keymem(
        "bench", "embedder", "--clients", "2", "--seconds", "0.5", "--direct", "--json"
    )
    report = json.loads(result.stdout)
    paths = {r["path"]: r for r in report["results"]}
    assert set(paths) == {"router", "direct"}
    for measured in paths.values():
        assert measured["requests"] > 0 and measured["errors"] == 0
        assert 0 < measured["p50_ms"] <= measured["p99_ms"] <= measured["max_ms"]
    assert report["router_over_direct_p50"] == pytest.approx(
        paths["router"]["p50_ms"] / paths["direct"]["p50_ms"], rel=0.01
    )


def test_demo_shows_the_association_story_end_to_end(deployment: Deployment) -> None:
    shown = deployment.keymem("demo").stdout
    assert 'read_key(fruit) → "The user likes strawberries more than any other fruit"' in shown
    assert "[hop 1 via a shared key]" in shown
    assert "<keymem-surfaced>" in shown and "strawberries" in shown.split("<keymem-surfaced>")[1]
    assert "→ 0 memories (it stays silent)" in shown
    again = deployment.keymem("demo").stdout  # rerunnable: the same story supersedes itself
    assert 'read_key(fruit) → "The user likes strawberries' in again


def test_doctor_checks_everything_and_names_the_fix(running: Deployment) -> None:
    import json

    report = {c["name"]: c for c in json.loads(running.keymem("doctor", "--json").stdout)}
    for name in ALL_PROGRAMS:
        assert report[f"service {name}"]["status"] == "ok", report[f"service {name}"]
    assert report["embedding model"]["status"] == "ok"
    assert report["graph schema"]["status"] == "ok"
    run_dir = running.home / "run"
    run_dir.chmod(0o755)
    try:
        loose = running.keymem("doctor", check=False)
        assert loose.returncode == 1
        assert "[fail] socket directory" in loose.stdout and f"chmod 700 {run_dir}" in loose.stdout
    finally:
        run_dir.chmod(0o700)
