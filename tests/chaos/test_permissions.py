"""Private by default: under the usual umask 022, nothing keymem writes is readable by others.

A real supervised deployment in a home the user created 0755: after a write, a backup, an
export to a directory outside the home, a hook call and ``keymem down``, the home is 0700 and
every directory and file in it (graph, WAL, backups, logs, supervisord.conf, lexicon cache,
sockets) has no group or other bits; the export is 0600 too.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from tests.supervised import Deployment, deployment_env

pytestmark = pytest.mark.supervised

USUAL_UMASK = 0o022
OTHERS = stat.S_IRWXG | stat.S_IRWXO


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """The umask most users run with; keymem's own entry points must not rely on it."""
    previous = os.umask(USUAL_UMASK)
    try:
        yield
    finally:
        os.umask(previous)


def open_to_others(root: Path) -> list[str]:
    loose = []
    for path in [root, *root.rglob("*")]:
        mode = path.lstat().st_mode
        if not stat.S_ISLNK(mode) and mode & OTHERS:
            loose.append(f"{path.relative_to(root.parent)} {stat.filemode(mode)}")
    return loose


def test_home_and_every_file_in_it_are_private_under_umask_022(usual_umask: None) -> None:
    parent = Path(tempfile.mkdtemp(prefix="km-", dir="/tmp"))  # ipc paths must stay short
    home = parent / "h"
    home.mkdir(mode=0o755)
    outside = parent / "exports"
    outside.mkdir(mode=0o755)
    deployment = Deployment(home, deployment_env(home))
    try:
        deployment.keymem("up")
        with Client(ipc_endpoints(home).frontend, timeout_ms=20_000) as client:
            client.call("memory", "remember", {"content": "A private fact", "keys": ["private"]})
        deployment.keymem("backup")
        deployment.keymem("export", str(outside / "all.json"))
        subprocess.run(
            [sys.executable, "-m", "keymem.hooks.prompt_submit"],
            input=b"not json",
            env=deployment.env,
            timeout=30,
            check=True,
        )
        deployment.keymem("down")
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        written = {p.name for p in home.rglob("*")}
        assert {"graph.duckdb", "supervisord.conf", "hook-failures.log", "graph.log"} <= written
        assert any(p.parent.name == "backups" for p in home.rglob("*"))
        assert open_to_others(home) == []
        assert stat.S_IMODE((outside / "all.json").stat().st_mode) == 0o600
    finally:
        deployment.teardown()
        shutil.rmtree(parent, ignore_errors=True)
