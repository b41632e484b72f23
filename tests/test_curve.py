"""CURVE on tcp: keys in KEYMEM_HOME, the router's ZAP handler, and namespace access per key.

Real sockets over loopback tcp with real CURVE handshakes and pyzmq's ZAP authenticator; the
namespace tests run the whole of keymem (real models, a real DuckDB file) behind a CURVE router,
with clients holding keys made by ``keymem keys``. The same across network namespaces, with
processes and a remote worker killed under load: tests/test_netns.py.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from keymem.protocol import curve
from keymem.protocol.calls import RequestIds, build_request
from keymem.protocol.client import Client
from keymem.protocol.endpoints import Endpoints
from keymem.protocol.errors import Forbidden, NotFound
from keymem.protocol.worker import Service, Worker
from keymem.services import keys
from keymem.services.cli import doctor, status
from keymem.services.cli import main as keymem
from keymem.services.config import ConfigError, Settings, load
from keymem.services.router.auth import Security
from keymem.services.stack import InprocStack
from tests.conftest import FAST_HEARTBEAT
from tests.full_stack import FullStack, start_services
from tests.ports import free_port_pair

REFUSED_WAIT_MS = 1_500  # how long a refused peer is given to be served, or told it is not


def make_keys(home: Path, *clients: tuple[str, str | None]) -> None:
    """``keymem keys init`` and ``add-client`` for each (name, namespaces) through the CLI."""
    os.environ["KEYMEM_HOME"] = str(home)
    try:
        assert keymem(["keys", "init"]) == 0
        for name, namespaces in clients:
            extra = [] if namespaces is None else ["--namespaces", namespaces]
            assert keymem(["keys", "add-client", name, *extra]) == 0
    finally:
        del os.environ["KEYMEM_HOME"]


def secure_endpoints(home: Path) -> Endpoints:
    """What ``KEYMEM_TRANSPORT=tcp`` resolves to in a home with keys: this host's key
    (``local``) registered for both endpoints."""
    env = {
        "KEYMEM_TRANSPORT": "tcp",
        "KEYMEM_TCP_PORT": str(free_port_pair()),
        "KEYMEM_CLIENT_KEY": "local",
    }
    return Settings.from_config(load(env, home=home)).endpoints


@pytest.fixture
def secure_stack(tmp_path: Path) -> Iterator[tuple[InprocStack, Path]]:
    """A CURVE router on loopback tcp (no workers) and its home."""
    make_keys(tmp_path, ("team-a", "team-a"), ("worker-host", None))
    endpoints = secure_endpoints(tmp_path)
    with InprocStack(
        heartbeat=FAST_HEARTBEAT, endpoints=endpoints, security=Security.of_home(tmp_path)
    ) as stack:
        yield stack, tmp_path


def test_keys_are_private_listed_and_revoked(tmp_path: Path) -> None:
    make_keys(tmp_path, ("team-a", "Team-A, shared*"), ("ops", None))
    where = keys.keys_dir(tmp_path)
    for path in [where, *where.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), path
    access = json.loads((where / "access.json").read_text())
    assert access["team-a"]["namespaces"] == ["team-a", "shared*"]
    assert access["ops"]["namespaces"] is None and access["local"]["namespaces"] is None
    os.environ["KEYMEM_HOME"] = str(tmp_path)
    try:
        assert keymem(["keys", "add-client", "team-a"]) == 1  # exists: revoke first
        assert keymem(["keys", "add-client", "Bad Name"]) == 1
        assert keymem(["keys", "revoke", "team-a"]) == 0
        assert keymem(["keys", "revoke", "team-a"]) == 1
    finally:
        del os.environ["KEYMEM_HOME"]
    assert set(keys.read_access(tmp_path)) == {"local", "ops"}
    assert not (where / "clients" / "team-a.key_secret").exists()


def test_tcp_takes_curve_when_keys_exist_and_refuses_plain_tcp_elsewhere(tmp_path: Path) -> None:
    remote = {"KEYMEM_TRANSPORT": "tcp", "KEYMEM_TCP_HOST": "10.213.0.1"}
    with pytest.raises(ConfigError, match="non-loopback"):
        Settings.from_config(load({**remote, "KEYMEM_TCP_INSECURE": "true"}, home=tmp_path))
    with pytest.raises(ConfigError, match="keymem keys init"):
        Settings.from_config(load({"KEYMEM_TRANSPORT": "tcp"}, home=tmp_path))
    make_keys(tmp_path, ("team-a", "team-a"))
    settings = Settings.from_config(load(remote, home=tmp_path))
    endpoints = settings.endpoints
    assert endpoints.secure and endpoints.frontend == "tcp://10.213.0.1:47810"
    (check,) = doctor._transport(settings)
    assert check.status == "ok" and "under CURVE as client key 'local'" in check.detail
    assert endpoints.direct("embedder", 1) is None  # only the router authenticates
    with pytest.raises(ConfigError, match="keymem keys add-client nobody"):
        Settings.from_config(load({**remote, "KEYMEM_CLIENT_KEY": "nobody"}, home=tmp_path))


def test_an_unknown_or_missing_key_is_refused_and_logged(
    secure_stack: tuple[InprocStack, Path], caplog: pytest.LogCaptureFixture
) -> None:
    stack, home = secure_stack
    frontend = stack.endpoints.frontend
    with Client(frontend) as local:
        assert local.call("router", "ping")["pong"]
    server_public = keys.client_keys(home, "local").server_public
    stranger = curve.ClientKeys(server_public, curve.KeyPair(*zmq.curve_keypair()))
    caplog.set_level(logging.WARNING, logger="keymem.router.auth")
    with Client(frontend, keys=stranger, timeout_ms=REFUSED_WAIT_MS) as client:
        started = time.monotonic()
        with pytest.raises(Forbidden, match="refused this host's CURVE key"):
            client.call("router", "ping", retry=True)
        assert time.monotonic() - started < REFUSED_WAIT_MS / 1000  # told, not timed out
    assert stack.broker.security is not None and stack.broker.security.access.refused == 1
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refusals and "unknown key" in refusals[0] and "127.0.0.1" in refusals[0]
    # Without CURVE at all the handshake fails before any request is read.
    plain: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    try:
        plain.setsockopt(zmq.LINGER, 0)
        plain.connect(frontend)
        plain.send_multipart(build_request(RequestIds(), "router", "ping", None, 1_000).frames())
        assert plain.poll(REFUSED_WAIT_MS) == 0
    finally:
        plain.close()


def echo_service() -> Service:
    service = Service("echo")
    service.add("echo", lambda body: body, idempotent=True)
    return service


def test_only_a_key_for_every_namespace_may_register_a_worker(
    secure_stack: tuple[InprocStack, Path], caplog: pytest.LogCaptureFixture
) -> None:
    stack, home = secure_stack
    caplog.set_level(logging.WARNING, logger="keymem.router.auth")
    team = Worker(echo_service(), stack.endpoints.backend, keys=keys.client_keys(home, "team-a"))
    thread = threading.Thread(target=team.run, daemon=True)
    thread.start()
    try:
        time.sleep(REFUSED_WAIT_MS / 1000)
        assert "echo" not in {w.service for w in stack.broker.workers.values()}
        assert any("may not serve as a worker" in r.getMessage() for r in caplog.records)
    finally:
        team.stop()
        thread.join(5)
    remote = stack.add_worker(echo_service(), keys=keys.client_keys(home, "worker-host"))
    with Client(stack.endpoints.frontend) as client:
        assert client.call("echo", "echo", {"x": 1}) == {"x": 1}
        services = client.call("router", "stats")["services"]
    (listed,) = services["echo"]["workers"]
    assert (listed["address"], listed["key"]) == ("127.0.0.1", "worker-host")
    (shown,) = status.remote_workers(services)  # what keymem status lists
    assert (shown["service"], shown["address"], shown["key"]) == (
        "echo",
        "127.0.0.1",
        "worker-host",
    )
    assert remote.worker.identity in stack.broker.workers
    revoke(home, "worker-host")
    give_up = time.monotonic() + 5
    while any(w.service == "echo" for w in stack.broker.workers.values()):
        assert time.monotonic() < give_up, "a revoked worker kept serving"
        time.sleep(0.05)


def revoke(home: Path, name: str) -> None:
    os.environ["KEYMEM_HOME"] = str(home)
    try:
        assert keymem(["keys", "revoke", name]) == 0
    finally:
        del os.environ["KEYMEM_HOME"]


@pytest.fixture(scope="module")
def teams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FullStack, Path]]:
    """Every real service behind a CURVE router; keys for two teams (KEYMEM_CLIENT_KEY picks
    one per host; here each client is handed its key)."""
    home = tmp_path_factory.mktemp("teams")
    make_keys(home, ("team-a", "team-a"), ("team-b", "team-b,shared*"))
    endpoints = secure_endpoints(home)
    with InprocStack(endpoints=endpoints, security=Security.of_home(home)) as stack:
        yield start_services(stack, stack.settings(home)), home


def team_client(teams: tuple[FullStack, Path], name: str) -> Client:
    stack, home = teams
    return Client(stack.stack.endpoints.frontend, keys=keys.client_keys(home, name))


def test_a_client_key_decides_what_a_host_may_read(teams: tuple[FullStack, Path]) -> None:
    full, _ = teams
    with team_client(teams, "team-a") as a, team_client(teams, "team-b") as b:
        secret = a.call(
            "memory",
            "remember",
            {"content": "Vault code is 4711", "keys": ["vault code"], "namespace": "team-a"},
        )
        memory_id = secret["saved"]
        b.call(
            "memory",
            "remember",
            {"content": "Lunch is at noon", "keys": ["lunch"], "namespace": "shared-lunch"},
        )
        with pytest.raises(Forbidden, match="team-a"):
            b.call("memory", "search", {"query": "vault code", "namespace": "team-a"})
        with pytest.raises(Forbidden):  # by id, naming the namespace
            b.call("memory", "read_memory", {"memory_id": memory_id, "namespace": "team-a"})
        with pytest.raises(NotFound):  # by id, in its own namespace: not there
            b.call("memory", "read_memory", {"memory_id": memory_id, "namespace": "team-b"})
        with pytest.raises(Forbidden):  # omitted namespace is default, not theirs
            b.call("memory", "read_memory", {"memory_id": memory_id})
        with pytest.raises(Forbidden):  # around the memory service
            b.call("graph", "get_memories", {"ids": [memory_id], "namespace": "team-a"})
        with pytest.raises(Forbidden):
            b.call(
                "memory",
                "remember_batch",
                {
                    "items": [
                        {"content": "planted", "keys": ["plant"], "namespace": "team-b"},
                        {"content": "planted", "keys": ["plant"], "namespace": "team-a"},
                    ]
                },
            )
        recalled = b.call(
            "memory", "recall", {"query": "vault code", "namespaces": ["team-a", "team-b"]}
        )
        assert recalled["namespace"] == "team-b"  # narrowed to what it may read
        assert "4711" not in json.dumps(recalled)
        counted = b.call("memory", "counts", {"namespace": "shared-lunch"})
        assert counted["namespaces"]["shared-lunch"]["memories"] == 1
        assert "team-a" not in json.dumps(counted)
        found = a.call(
            "memory",
            "search",
            {"query": "vault code", "namespace": "team-a", "min_seq": secret["seq"]},
        )
        assert any(m["memory_id"] == memory_id for m in found["memories"])
        # The router host's own key sees every namespace.
        everything = full.client.call("memory", "counts", {})
        assert {"team-a", "shared-lunch"} <= set(everything["namespaces"])


def test_a_revoked_key_is_refused_from_its_next_message(teams: tuple[FullStack, Path]) -> None:
    _, home = teams
    make_keys(home, ("team-c", "team-c"))  # init keeps the router keys; a new client
    with team_client(teams, "team-c") as c:
        assert c.call("memory", "counts", {"namespace": "team-c"})["memories"] == 0
        revoke(home, "team-c")
        give_up = time.monotonic() + 5
        while time.monotonic() < give_up:  # the router reads access.json again each beat
            try:
                c.call("router", "ping")
            except Forbidden as refused:
                assert "no longer admitted" in refused.message
                break
            time.sleep(0.1)
        else:
            pytest.fail("a revoked key kept being served")
