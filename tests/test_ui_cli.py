"""``keymem ui``'s command line, where no deployment is needed."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from tests.supervised import deployment_env

CLI_TIMEOUT_S = 60


def keymem_ui(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "keymem.services.cli", "ui", *args],
        env=deployment_env(home),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )


def test_a_busy_port_is_reported_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = keymem_ui(tmp_path, "--port", str(port))
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "--port 0" in done.stderr
    assert not (tmp_path / "supervisord.conf").exists()  # no service was started
    assert not (tmp_path / "ui.token").exists()


def test_a_port_out_of_range_is_a_usage_error(tmp_path: Path) -> None:
    done = keymem_ui(tmp_path, "--port", "70000")
    assert done.returncode == 2
    assert "a port is an integer in [0, 65535]" in done.stderr
