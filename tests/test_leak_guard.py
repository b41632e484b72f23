"""The suite's leak guard (tests/leaks.py) fails the file that leaves something running, names
it, and kills the processes it left, so the files after it run clean."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 120
# the suite's conftest as a plugin, on files outside the suite
PYTEST = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider"]

LEAKY = """
import subprocess, sys, threading, time

def test_leaves_a_thread_and_a_process() -> None:
    threading.Thread(target=time.sleep, args=(60,), name="leaked-sleeper", daemon=True).start()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    print(f"child {child.pid}")
"""
CLEAN = """
def test_after_the_leaky_file() -> None:
    pass
"""


def test_a_file_that_leaves_a_process_and_a_thread_fails_and_its_process_is_killed(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_a_leaky.py").write_text(LEAKY)
    (tmp_path / "test_b_clean.py").write_text(CLEAN)
    completed = subprocess.run(
        [*PYTEST, "-s", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    out = completed.stdout
    assert completed.returncode == 1, out
    assert "test_a_leaky.py left behind" in out
    assert "leaked-sleeper" in out
    assert "time.sleep(60)" in out
    assert "2 passed, 1 error" in out  # the clean file after it passes
    child = int(out.split("child ", 1)[1].split()[0])
    give_up = time.monotonic() + 5
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < give_up, "the leaked process was not killed"
        time.sleep(0.05)
