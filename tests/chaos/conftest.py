"""The chaos suite: keymem probed from outside, as an attacker or a failing machine would.

Every test here is marked ``chaos``. The short form runs in the default test run (a few kills
under load, a fuzz sample, the tables); the long form is marked ``chaos_long``, is excluded by
default, and prints the figures docs/RELIABILITY.md quotes (``pytest -m chaos_long -s
tests/chaos``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

CHAOS_DIR = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if CHAOS_DIR in Path(item.path).parents:
            item.add_marker(pytest.mark.chaos)
