"""Driving a real deployment from tests: the `keymem` CLI as a subprocess, in its own home."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from keymem.services.supervision import SHUTDOWN_TIMEOUT_S

CLI_TIMEOUT_S = 120
CLI_START_S = 30  # the CLI's own imports on a loaded machine
# `keymem down` may wait for the slowest program's stop and supervisord's exit
DOWN_TIMEOUT_S = SHUTDOWN_TIMEOUT_S + CLI_START_S


@dataclass
class Deployment:
    home: Path
    env: dict[str, str]

    def keymem(
        self, *args: str, check: bool = True, timeout_s: float = CLI_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        completed = subprocess.run(
            [sys.executable, "-m", "keymem.services.cli", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if check and completed.returncode != 0:
            raise AssertionError(
                f"keymem {' '.join(args)} exited {completed.returncode}\n"
                f"stdout: {completed.stdout}\nstderr: {completed.stderr}"
            )
        return completed

    def status(self) -> dict[str, Any]:
        report: dict[str, Any] = json.loads(self.keymem("status", "--json", check=False).stdout)
        return report

    def wait_all_running(self, timeout_s: float = 30) -> dict[str, Any]:
        give_up = time.monotonic() + timeout_s
        while True:
            report = self.status()
            states = {n: s["state"] for n, s in report["services"].items()}
            if set(states.values()) == {"RUNNING"}:
                return report
            assert time.monotonic() < give_up, f"services not all RUNNING: {states}"
            time.sleep(0.2)

    def processes(self) -> list[psutil.Process]:
        """Every live process started for this home (supervisord and its programs)."""
        found = []
        for proc in psutil.process_iter(["cmdline", "environ"]):
            try:
                cmdline = " ".join(proc.info["cmdline"] or [])
                environ = proc.info["environ"] or {}
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if str(self.home) in cmdline or environ.get("KEYMEM_HOME") == str(self.home):
                found.append(proc)
        return found

    def teardown(self) -> None:
        """`keymem down`, then kill whatever of this home it left (a test's home is removed
        next: a supervisord outliving it could never be reached again)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.keymem("down", check=False, timeout_s=DOWN_TIMEOUT_S)
        for process in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()


def deployment_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYMEM_")}
    env.update(KEYMEM_HOME=str(home), KEYMEM_HEARTBEAT_MS="200", **extra)
    return env


@contextlib.contextmanager
def running_deployment(
    *,
    prefix: str = "km-",
    shipped_heartbeat: bool = False,
    up_timeout_s: float | None = None,
    prepare: Callable[[Path], object] | None = None,
    **extra: str,
) -> Iterator[Deployment]:
    """A deployment started with `keymem up` in a fresh short home, stopped and removed after
    (also when `up` fails half-way). ``shipped_heartbeat``: the deployed heartbeat instead of
    the tests' fast one, for recovery times as users see them; ``prepare``: fills the home
    before `up` (a store, say)."""
    home = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))  # ipc paths must stay short
    env = deployment_env(home, **extra)
    if shipped_heartbeat:
        env.pop("KEYMEM_HEARTBEAT_MS")
    deployed = Deployment(home, env)
    try:
        if prepare is not None:
            prepare(home)
        deployed.keymem("up", *([] if up_timeout_s is None else ["--timeout", str(up_timeout_s)]))
        yield deployed
    finally:
        deployed.teardown()
        shutil.rmtree(home, ignore_errors=True)
