"""The launcher's settings reach the supervised services, and a launcher whose settings differ
from the running ones says so instead of being silently ignored (docs/CONFIGURATION.md)."""

from __future__ import annotations

import configparser
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from tests.supervised import Deployment, deployment_env

pytestmark = pytest.mark.supervised


@pytest.fixture
def deployment(short_home: Path) -> Iterator[Deployment]:
    # a loaded machine can take a while to load the models, three times here
    deployed = Deployment(short_home, deployment_env(short_home, KEYMEM_UP_TIMEOUT_S="240"))
    yield deployed
    deployed.keymem("down", check=False)


def reranking(deployment: Deployment) -> bool:
    with Client(ipc_endpoints(deployment.home).frontend, timeout_ms=5_000) as client:
        return bool(client.call("reranker", "info")["enabled"])


def test_a_launcher_with_other_settings_is_told_and_restart_applies_them(
    deployment: Deployment,
) -> None:
    deployment.keymem("up")
    assert reranking(deployment)
    off = Deployment(deployment.home, {**deployment.env, "KEYMEM_RERANK": "false"})

    told = off.keymem("up")
    assert "already running" in told.stdout
    assert "KEYMEM_RERANK: running 'true', here 'false' (environment)" in told.stderr
    assert "keymem up --restart" in told.stderr
    assert reranking(deployment)  # nothing changed behind the user's back

    off.keymem("up", "--restart")
    assert not reranking(deployment)
    assert off.keymem("up").stderr == ""  # the same settings: nothing to say
    # the services keep what their launcher gave them, whoever launches next
    back = deployment.keymem("up")
    assert "KEYMEM_RERANK: running 'false', here 'true' (default)" in back.stderr
    assert not reranking(deployment)


def test_the_config_file_reaches_the_services_and_its_changes_are_reported(
    deployment: Deployment,
) -> None:
    config = deployment.home / "keymem.toml"
    config.write_text("rerank = false\n")
    deployment.keymem("up")
    assert not reranking(deployment)
    config.write_text("rerank = true\n")
    told = deployment.keymem("up")
    assert f"KEYMEM_RERANK: running 'false', here 'true' ({config})" in told.stderr
    assert not reranking(deployment)


def test_every_service_runs_without_numpys_huge_pages(deployment: Deployment) -> None:
    """Huge pages made the graph's start at 1M 2.6 times slower here and the lexicon's saves
    and updates dearer (catalog.py): every program's processes, the parent that keeps a
    model and the worker forked from it, run with numpy's switch off."""
    deployment.keymem("up")
    deployment.wait_all_running()
    group = configparser.RawConfigParser()
    group.read(deployment.home / "supervisord.conf")
    supervised = set(group.get("group:keymem", "programs").split(","))
    programs: dict[str, list[psutil.Process]] = {}
    for process in deployment.processes():
        command = process.cmdline()
        if command[-2:-1] == ["keymem.services"]:
            programs.setdefault(command[-1], []).append(process)
    assert set(programs) == supervised
    assert len(programs["graph"]) == 2  # the parent and its forked worker
    for processes in programs.values():
        for process in processes:
            assert process.environ().get("NUMPY_MADVISE_HUGEPAGE") == "0", process.cmdline()
