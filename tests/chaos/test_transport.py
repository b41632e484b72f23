"""TCP without keys refuses to start: an unauthenticated backend lets any local process register
as a worker and read other clients' requests, so plain tcp is an explicit, warned opt-in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from keymem.services.cli import doctor
from keymem.services.config import EXIT_CLI_CONFIG, EXIT_SERVICE_CONFIG, Settings, load
from tests.supervised import Deployment, deployment_env

TCP = {"KEYMEM_TRANSPORT": "tcp", "KEYMEM_TCP_PORT": "47990"}


def test_tcp_without_the_insecure_flag_refuses_to_start(short_home: Path) -> None:
    deployment = Deployment(short_home, deployment_env(short_home, **TCP))
    up = deployment.keymem("up", check=False)
    assert up.returncode == EXIT_CLI_CONFIG
    lines = up.stderr.strip().splitlines()
    assert len(lines) == 1 and "KEYMEM_TCP_INSECURE=true" in lines[0]
    assert deployment.processes() == []  # no supervisord, no service
    router = subprocess.run(
        [sys.executable, "-m", "keymem.services", "router"],
        env=deployment.env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert router.returncode == EXIT_SERVICE_CONFIG
    assert "no authentication" in router.stderr


def test_doctor_warns_about_insecure_tcp(short_home: Path) -> None:
    env = deployment_env(short_home, **TCP, KEYMEM_TCP_INSECURE="true")
    (check,) = doctor._transport(Settings.from_config(load(env)))
    assert check.status == "warn" and "without authentication" in check.detail
