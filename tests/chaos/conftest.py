"""The chaos suite: keymem probed from outside, as an attacker or a failing machine would.

Every test here is marked ``chaos``. The short form runs in the default test run (a few kills
under load, a fuzz sample, the tables); the long form is marked ``chaos_long``, is excluded by
default, and prints the figures docs/RELIABILITY.md quotes (``pytest -m chaos_long -s
tests/chaos``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from tests.chaos.harness import CALL_TIMEOUT_MS, UP_TIMEOUT_S
from tests.supervised import Deployment, running_deployment

CHAOS_DIR = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if CHAOS_DIR in Path(item.path).parents:
            item.add_marker(pytest.mark.chaos)


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    """One deployment per module with the shipped heartbeat: recovery as users see it."""
    with running_deployment(shipped_heartbeat=True, up_timeout_s=UP_TIMEOUT_S) as deployed:
        yield deployed


@pytest.fixture
def client(deployment: Deployment) -> Iterator[Client]:
    with Client(ipc_endpoints(deployment.home).frontend, timeout_ms=CALL_TIMEOUT_MS) as made:
        yield made
