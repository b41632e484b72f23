"""keymem across hosts: network namespaces made by the test stand in for three machines.

The router's host, a worker host and a client host, joined by a bridge (10.213.X.0/24, nothing
leaves them; benchmarks/remote_workers.py builds and always removes them). Real processes, real
CURVE over real tcp between namespaces: the router admits the keys it handed out and refuses
others; a remote embedder (``keymem worker embedder --connect``) killed or cut off under load
loses no request and makes none wait past its deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Any

import pytest
from zmq.auth.certs import create_certificates

from benchmarks.remote_workers import (
    CLIENT,
    LATE_SLACK_MS,
    MODULE,
    PYTHON,
    REMOTE_WORKER_KEY,
    ROUTER,
    WORKER,
    Host,
    hand_out_keys,
    hosts,
    start_remote_worker,
    start_router,
    wait_for_embedders,
)


def netns_unavailable() -> str | None:
    """Why namespaces cannot be made here (not root, no iproute2), or None."""
    probe = f"km-probe-{os.getpid()}"
    try:
        made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, timeout=30)
    except FileNotFoundError:
        return "iproute2's ip is not installed"
    if made.returncode != 0:
        return f"ip netns add failed (root needed): {made.stderr.decode().strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return None


REASON = netns_unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

LOAD_TIMEOUT_MS = 5_000  # above the heartbeat window (3 s): a cut-off worker's calls are retried
LOAD_SECONDS = 16
FAILURE_AT_S = 6


def router_workers(client: Host, key: str | None = None) -> subprocess.CompletedProcess[str]:
    env = client.env if key is None else {**client.env, "KEYMEM_CLIENT_KEY": key}
    return subprocess.run(
        ["ip", "netns", "exec", client.name, PYTHON, "-m", MODULE, "workers"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_across_hosts_a_handed_out_key_is_served_and_an_unknown_one_refused() -> None:
    with hosts() as net:
        hand_out_keys(net)
        start_router(net, ("router",))
        client = net[CLIENT]
        give_up = time.monotonic() + 120
        while (listed := router_workers(client)).returncode != 0:
            assert time.monotonic() < give_up, listed.stderr
            time.sleep(1)
        assert json.loads(listed.stdout) == []  # the router answered over CURVE tcp
        create_certificates(client.home / "keys" / "clients", "stranger")
        refused = router_workers(client, "stranger")
        assert refused.returncode != 0 and "Forbidden" in refused.stderr
        log = (net[ROUTER].home / "router.log").read_text()
        assert f"refused a frontend connection from {client.address}: unknown key" in log


def load_during(net: dict[str, Host], failure: Any) -> dict[str, Any]:
    """32 clients on the client host for LOAD_SECONDS; ``failure()`` runs FAILURE_AT_S in."""
    client = net[CLIENT]
    args = ["--seconds", str(LOAD_SECONDS), "--timeout-ms", str(LOAD_TIMEOUT_MS)]
    loading = client.spawn(PYTHON, "-m", MODULE, "load", *args, log="load.json")
    time.sleep(FAILURE_AT_S)
    failure()
    loading.wait(LOAD_SECONDS + 120)
    result: dict[str, Any] = json.loads((client.home / "load.json").read_text().splitlines()[-1])
    (client.home / "load.json").unlink()
    return result


def assert_nothing_lost(result: dict[str, Any]) -> None:
    """Every call ended with a reply or a typed error, and none past its deadline (+ slack)."""
    assert result["late"] == 0
    assert result["worst_ms"] <= LOAD_TIMEOUT_MS + LATE_SLACK_MS
    assert result["outcomes"]["ok"] > 0
    failed = sum(n for code, n in result["outcomes"].items() if code != "ok")
    # The embed method is idempotent: the router sends a dead worker's calls to the live one.
    assert failed <= result["outcomes"]["ok"] // 100, result


@pytest.mark.slow
def test_a_remote_worker_killed_or_cut_off_under_load_loses_no_request() -> None:
    with hosts() as net:
        hand_out_keys(net)
        start_router(net)
        wait_for_embedders(net, 1)
        remote = start_remote_worker(net)
        workers = wait_for_embedders(net, 2)
        assert {(w["key"], w["address"]) for w in workers} == {
            ("local", net[ROUTER].address),
            (REMOTE_WORKER_KEY, net[WORKER].address),
        }
        killed = load_during(net, lambda: os.killpg(remote.pid, signal.SIGKILL))
        assert_nothing_lost(killed)
        assert [w["key"] for w in wait_for_embedders(net, 1)] == ["local"]

        # Cut off instead: no FIN reaches the router; its heartbeats find the worker dead.
        start_remote_worker(net)
        wait_for_embedders(net, 2)
        worker = net[WORKER]
        cut = ["ip", "-n", worker.name, "link", "set", worker.link, "down"]
        cut_off = load_during(net, lambda: subprocess.run(cut, check=True, timeout=30))
        assert_nothing_lost(cut_off)
        assert [w["key"] for w in wait_for_embedders(net, 1)] == ["local"]


REMEMBER = """
import json, sys
from keymem.protocol.client import Client
from keymem.services.config import Settings
with Client(Settings.from_env().endpoints.frontend, timeout_ms=30_000) as client:
    body = {"content": sys.argv[1], "keys": sys.argv[2].split(","), "namespace": sys.argv[3]}
    print(json.dumps(client.call("memory", "remember", body)))
"""
VAULT = "The staging vault passphrase rotates every Monday at 09:00"
UP_TIMEOUT_S = 900.0


def hook_context(client: Host, key: str, project: str) -> str:
    """What the real hook prints on the client host for a prompt in ``project``."""
    payload = {"hook_event_name": "UserPromptSubmit", "cwd": project, "session_id": "s1",
               "prompt": "when does the staging vault passphrase rotate?"}  # fmt: skip
    completed = subprocess.run(
        ["ip", "netns", "exec", client.name, PYTHON, "-m", "keymem.hooks.prompt_submit"],
        input=json.dumps(payload).encode(),
        env={**client.env, "KEYMEM_CLIENT_KEY": key, "KEYMEM_HOOK_TIMEOUT_MS": "10000"},
        capture_output=True,
        timeout=120,
    )
    assert completed.returncode == 0
    return completed.stdout.decode()


@pytest.mark.slow
def test_a_front_end_on_another_host_reads_its_teams_namespace_only() -> None:
    with hosts() as net:
        router, client = net[ROUTER], net[CLIENT]
        router.keymem("keys", "init")
        teams = {"team-a": "team-a", "team-b": "team-b"}
        (client.home / "keys" / "clients").mkdir(parents=True, mode=0o700)
        (client.home / "keys" / "server.key").write_bytes(
            (router.home / "keys" / "server.key").read_bytes()
        )
        for name, namespaces in teams.items():
            router.keymem("keys", "add-client", name, "--namespaces", namespaces)
            secret = router.home / "keys" / "clients" / f"{name}.key_secret"
            (client.home / "keys" / "clients" / secret.name).write_bytes(secret.read_bytes())
        try:
            router.python("-m", "keymem.services.cli", "up", timeout_s=UP_TIMEOUT_S)
            team_a = {**client.env, "KEYMEM_CLIENT_KEY": "team-a"}
            client.env = team_a
            # A launcher on a client host starts nothing: it finds the remote router.
            assert "already running" in client.keymem("up")
            saved = json.loads(client.python("-c", REMEMBER, VAULT, "staging vault", "team-a"))
            project = client.home / "shop"
            project.mkdir()
            (client.home / "namespaces.json").write_text(json.dumps({str(project): "team-a"}))
            give_up = time.monotonic() + 60  # the lexicon indexes the write from the feed
            while saved["saved"] not in (context := hook_context(client, "team-a", str(project))):
                assert time.monotonic() < give_up, context
                time.sleep(1)
            assert "passphrase" in context
            assert hook_context(client, "team-b", str(project)) == ""  # forbidden: silent
        finally:
            subprocess.run(
                ["ip", "netns", "exec", router.name, PYTHON, "-m", "keymem.services.cli", "down"],
                env=router.env,
                capture_output=True,
                timeout=180,
            )
