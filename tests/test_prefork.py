"""services/prefork.py with real processes: a parent forking a toy worker, as the lexicon does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from keymem.services.config import EXIT_SERVICE_CONFIG
from keymem.services.prefork import EXIT_STARTUP_FAILED, MAX_QUICK_EXITS

GIVE_UP_S = 60.0
POLL_S = 0.02

# The worker records its start and its stop; what it does in between is the mode.
PARENT = """
import os, signal, sys, threading
from pathlib import Path
from keymem.services import prefork

mode, journal = sys.argv[1], Path(sys.argv[2])
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())

def note(what):
    with journal.open("a") as out:
        out.write(f"{what} {os.getpid()}\\n")

def work(child_stop):
    note("start")
    if mode == "config":
        return 78
    if mode == "crash":
        raise RuntimeError("the worker's build failed")
    child_stop.wait()
    note("stop")
    return 0

sys.exit(prefork.run(work, stop))
"""


# Starts a parent in a mode; its process and the journal its workers write.
Start = Callable[[str], tuple[subprocess.Popen[str], Path]]


@pytest.fixture
def parent(tmp_path: Path) -> Iterator[Start]:
    started: list[subprocess.Popen[str]] = []

    def start(mode: str) -> tuple[subprocess.Popen[str], Path]:
        journal = tmp_path / f"{mode}.journal"
        process = subprocess.Popen(
            [sys.executable, "-c", PARENT, mode, str(journal)],
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        started.append(process)
        return process, journal

    yield start
    for process in started:  # the parent and any worker of it (one session each)
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


def _entries(journal: Path, what: str) -> list[int]:
    try:
        lines = journal.read_text().split("\n")
    except FileNotFoundError:
        return []
    return [int(line.split()[1]) for line in lines if line.startswith(f"{what} ")]


def _wait_entries(journal: Path, what: str, count: int) -> list[int]:
    give_up = time.monotonic() + GIVE_UP_S
    while len(found := _entries(journal, what)) < count:
        assert time.monotonic() < give_up, f"no {count} {what!r} entries: {journal.read_text()}"
        time.sleep(POLL_S)
    return found


def test_a_killed_worker_is_forked_again_and_stopping_the_parent_stops_it(parent: Start) -> None:
    process, journal = parent("serve")
    (first,) = _wait_entries(journal, "start", 1)
    assert psutil.Process(first).ppid() == process.pid
    os.kill(first, signal.SIGKILL)
    second = _wait_entries(journal, "start", 2)[1]
    assert second != first and psutil.Process(second).ppid() == process.pid
    process.send_signal(signal.SIGTERM)
    assert process.wait(GIVE_UP_S) == 0
    assert _entries(journal, "stop") == [second]  # stopped cleanly, not left running


def test_a_worker_whose_parent_is_killed_stops(parent: Start) -> None:
    process, journal = parent("serve")
    (worker,) = _wait_entries(journal, "start", 1)
    process.kill()
    process.wait()
    assert _wait_entries(journal, "stop", 1) == [worker]


def test_a_configuration_error_ends_the_parent_with_78(parent: Start) -> None:
    process, journal = parent("config")
    assert process.wait(GIVE_UP_S) == EXIT_SERVICE_CONFIG
    assert len(_entries(journal, "start")) == 1  # not retried: a restart cannot fix it


def test_a_worker_that_keeps_failing_at_start_ends_the_parent(parent: Start) -> None:
    process, journal = parent("crash")
    assert process.wait(GIVE_UP_S) == EXIT_STARTUP_FAILED
    assert len(_entries(journal, "start")) == MAX_QUICK_EXITS
    assert process.stderr is not None
    errors = process.stderr.read()
    assert "the worker's build failed" in errors and "giving up" in errors
