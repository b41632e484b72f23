"""Shared fixtures: short homes for ipc paths, in-process stacks, and a fast heartbeat policy.

Tests marked ``slow`` (long benchmarks) or ``chaos_long`` (the chaos suite's long form) run
only when the ``-m`` expression names them, so ``pytest -m "not supervised"`` (the fast tier)
and plain ``pytest`` (everything CI runs) both leave them out.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from keymem.protocol.worker import HeartbeatPolicy
from keymem.services.stack import InprocStack
from tests import leaks

# Fast liveness so tests notice dead or hung workers in ~0.3 s instead of 3 s.
FAST_HEARTBEAT = HeartbeatPolicy(interval_ms=100, liveness=3)
OPT_IN_MARKERS = ("slow", "chaos_long")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    expression = str(config.getoption("markexpr") or "")
    left_out = [m for m in OPT_IN_MARKERS if not re.search(rf"\b{m}\b", expression)]
    kept: list[pytest.Item] = []
    deselected: list[pytest.Item] = []
    for item in items:
        opted_out = any(item.get_closest_marker(m) for m in left_out)
        (deselected if opted_out else kept).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


@pytest.fixture
def short_home() -> Iterator[Path]:
    """A KEYMEM_HOME under /tmp with a short path: ipc socket paths must fit in 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="km-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def stack() -> Iterator[InprocStack]:
    """A running in-process router with a fast heartbeat; add workers with ``add_worker``."""
    with InprocStack(heartbeat=FAST_HEARTBEAT) as running:
        yield running


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--leak-report",
        action="store_true",
        help="print what each test file leaves open (fds, zmq sockets, threads, processes)",
    )


def pytest_configure(config: pytest.Config) -> None:
    leaks.mark_run()  # before any test starts a process


@dataclass
class _Censuses:
    run: leaks.Census | None = None
    file: leaks.Census | None = None
    path: Path | None = None


_CENSUSES = _Censuses()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.path != _CENSUSES.path:
        _CENSUSES.path = item.path
        _CENSUSES.file = leaks.take_census()
        _CENSUSES.run = _CENSUSES.run or _CENSUSES.file


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After a file's last test (its module fixtures gone too): fail it if it left anything."""
    yield
    if nextitem is not None and nextitem.path == item.path:
        return
    assert _CENSUSES.run is not None and _CENSUSES.file is not None
    now = leaks.take_census()
    if item.config.getoption("leak_report"):
        reporter = item.config.pluginmanager.get_plugin("terminalreporter")
        assert reporter is not None
        reporter.write_line(f"[leaks] {item.path.name}: {now.describe()}")
    found = leaks.leaks(_CENSUSES.run, _CENSUSES.file, now)
    exhausted = leaks.exhausted(now)
    if not found and exhausted is None:
        return
    leaks.kill(now.processes)  # the files after this one run clean
    message = f"{item.path.name} left behind (every test tears down what it starts):\n  " + (
        "\n  ".join([*found, *([exhausted] if exhausted else [])])
    )
    if exhausted is not None:
        pytest.exit(message, returncode=pytest.ExitCode.TESTS_FAILED)
    pytest.fail(message, pytrace=False)
