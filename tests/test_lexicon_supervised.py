"""The lexicon's cache across `keymem down` and `up` in the real deployment (supervisord, the
forked worker, the graph's feed): a `down` right after a first index must not cost the next
`up` a second one (at 1M memories that is minutes of Kiwi and feed paging)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.protocol.errors import KeymemError
from keymem.services.lexicon import cache
from keymem.store.database import graph_path
from tests.supervised import Deployment, deployment_env

pytestmark = pytest.mark.supervised

STORE = Path("/tmp/km-scale5/store-10000")  # benchmarks.scale_store's 10k store
SERVING_TIMEOUT_S = 120.0


def _stats_when_serving(client: Client, memories: int) -> dict[str, Any]:
    give_up = time.monotonic() + SERVING_TIMEOUT_S
    while time.monotonic() < give_up:
        try:
            stats: dict[str, Any] = client.call("lexicon", "index_stats", timeout_ms=2_000)
            if stats["documents"] >= memories and stats["sync"]["phase"] == "live":
                return stats
        except KeymemError:
            pass
        time.sleep(0.1)
    raise AssertionError("the lexicon did not serve every memory in time")


@pytest.mark.skipif(not (STORE / "graph.duckdb").exists(), reason="needs the built 10k store")
def test_down_right_after_a_first_index_then_up_loads_the_cache(short_home: Path) -> None:
    deployed = Deployment(short_home, deployment_env(short_home))
    shutil.copy(STORE / "graph.duckdb", graph_path(short_home))
    frontend = ipc_endpoints(short_home).frontend
    try:
        deployed.keymem("up")
        with Client(frontend) as client:
            first = _stats_when_serving(client, 10_000)
        assert first["cache"]["loaded"] is False  # a first index from the feed
        deployed.keymem("down")  # at once: the save may still be running
        lexicon_dir = cache.cache_path(short_home).parent
        assert (lexicon_dir / cache.CACHE_FILE).stat().st_size > 0
        assert [p.name for p in lexicon_dir.iterdir() if p.suffix == ".tmp"] == []

        deployed.keymem("up")
        with Client(frontend) as client:
            again = _stats_when_serving(client, 10_000)
        assert again["cache"]["loaded"] is True
        assert again["cache"]["documents"] == 10_000
        assert again["sync"]["tokenized"] == 0 and again["sync"]["snapshots"] == 0
    finally:
        deployed.teardown()
