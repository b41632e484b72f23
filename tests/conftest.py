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
from pathlib import Path

import pytest

from keymem.protocol.worker import HeartbeatPolicy
from keymem.services.stack import InprocStack

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
