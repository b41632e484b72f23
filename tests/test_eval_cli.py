"""``keymem eval`` as users run it: argument and file errors fail fast (before any service
starts), and a real run on the fixture goes through supervised services and cleans up."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from keymem.services.cli import main
from keymem.services.evaluation.deployment import STARTING, reap_orphans

FIXTURES = Path(__file__).parent / "fixtures"
PER_QUERY = FIXTURES / "eval_tiny_per_query.json"
E2E_TIMEOUT_S = 120


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--k", "0"], "--k takes"),
        (["--k", "two"], "--k takes"),
        (["--methods", "keymem,magic"], "--methods takes"),
        (["--limit", "0"], "--limit must be"),
    ],
)
def test_bad_arguments_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", str(PER_QUERY), *args]) == 2
    assert message in capsys.readouterr().err


def test_bad_file_exits_2_naming_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(PER_QUERY.read_text())
    document["queries"][0]["gold"] = ["nope"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    assert main(["eval", str(bad)]) == 2
    assert "gold memory 'nope' does not exist" in capsys.readouterr().err


def test_provided_keys_on_a_keyless_file_fail_before_starting_services(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(PER_QUERY.read_text())
    for memory in document["memories"]:
        memory["keys"] = None
    keyless = tmp_path / "keyless.json"
    keyless.write_text(json.dumps(document))
    assert main(["eval", str(keyless), "--keys", "provided", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "has no keys" in err and "starting keymem" not in err


def announced_home(stderr: str) -> Path:
    """The temporary home the run printed (other runs may be going on beside this test)."""
    match = re.search(rf"{re.escape(STARTING)} (\S+) \.\.\.", stderr)
    assert match is not None, stderr
    return Path(match.group(1))


def processes_of(home: Path) -> list[int]:
    found = []
    for proc in psutil.process_iter(["environ", "cmdline", "status"]):
        try:
            environ = proc.info["environ"] or {}
            cmdline = " ".join(proc.info["cmdline"] or [])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if environ.get("KEYMEM_HOME") == str(home) or str(home) in cmdline:
            found.append(proc.pid)
    return found


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("KEYMEM_")}


@pytest.mark.supervised
def test_end_to_end_on_the_fixture_through_supervised_services() -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "keymem.services.cli",
            "eval",
            str(PER_QUERY),
            "--k",
            "1,2",
            "--json",
        ],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=E2E_TIMEOUT_S,
    )
    assert completed.returncode == 0, completed.stderr
    assert "loading into keymem (--keys provided)" in completed.stderr  # the progress bar
    report = json.loads(completed.stdout)
    assert report["setting"] == "per_query" and report["scored_queries"] == 4
    load = report["load"]
    assert (load["written"], load["keyless"]) == (21, 0)  # 5 stores of 4, plus m9 in q1's
    # m9 repeats m7's content in q1's store: the graph merges them and keymem's one id stands
    # for both benchmark ids
    assert load["merged"] == 1
    methods = report["methods"]
    # the keys are provided, so each flat baseline also runs over the text with its keys
    flat = ["bm25", "dense", "hybrid", "bm25+keys", "dense+keys", "hybrid+keys"]
    assert list(methods) == ["keymem", *flat]
    for name in flat:  # every gold in the top 2 on this fixture
        overall = methods[name]["overall"]
        assert overall["all"]["2"] == 1.0 and overall["mrr"] == 1.0, name
        assert methods[name]["median_ms"] > 0
    keymem = methods["keymem"]
    if keymem["unavailable"] is not None:  # a build without hybrid recall yet
        assert "memory.search" in keymem["unavailable"]
    else:
        assert keymem["errors"] == 0, keymem["first_error"]
        assert 0.0 <= keymem["overall"]["recall"]["2"] <= 1.0 and keymem["median_ms"] > 0
        assert set(keymem["by_type"]) == {"single-hop", "comparison"}
    not_found = report["not_found"]
    assert not_found["queries"] == 1
    assert not_found["unavailable"] is not None or not_found["rate"] in (0.0, 1.0)
    # every answerable query also went through inject, counted per type
    shown = report["inject_gold_shown"]
    assert {kind: v["queries"] for kind, v in shown.items()} == {"single-hop": 3, "comparison": 1}
    assert all(0 <= v["shown"] <= v["queries"] for v in shown.values())
    # the temporary deployment is gone: no home left, no process of it running
    home = announced_home(completed.stderr)
    assert not home.exists() and processes_of(home) == []


def _eval_until_supervised() -> tuple[subprocess.Popen[str], Path]:
    """A ``keymem eval`` subprocess, once its supervisord is up (its services are starting)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "keymem.services.cli", "eval", str(PER_QUERY)],
        env=clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        home = announced_home(process.stderr.readline())
        pidfile = home / "run" / "supervisord.pid"
        give_up = time.monotonic() + E2E_TIMEOUT_S
        while not pidfile.exists():
            assert time.monotonic() < give_up and process.poll() is None
            time.sleep(0.05)
    except BaseException:
        process.kill()
        raise
    return process, home


@pytest.mark.supervised
def test_sigterm_stops_the_services_and_removes_the_home() -> None:
    process, home = _eval_until_supervised()
    try:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=E2E_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert not home.exists() and processes_of(home) == []


@pytest.mark.supervised
def test_the_next_run_reaps_what_a_killed_run_left_running() -> None:
    """SIGKILL leaves no chance to clean up; the next eval stops those services and removes
    that home before starting its own."""
    process, home = _eval_until_supervised()
    process.kill()
    process.wait(timeout=E2E_TIMEOUT_S)
    assert home.exists() and processes_of(home) != []  # left behind, still running
    notes: list[str] = []
    assert reap_orphans(notes.append) >= 1
    assert any(str(home) in note for note in notes)
    assert not home.exists() and processes_of(home) == []
