"""Shared fixtures: short homes for ipc paths, in-process stacks, and a fast heartbeat policy."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from keymem.protocol.worker import HeartbeatPolicy
from keymem.services.stack import InprocStack

# Fast liveness so tests notice dead or hung workers in ~0.3 s instead of 3 s.
FAST_HEARTBEAT = HeartbeatPolicy(interval_ms=100, liveness=3)


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
