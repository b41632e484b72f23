"""Switching embedding models: every key is re-embedded into the new space, or the switch is
refused with a clear message when auto-migration is off."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from keymem.protocol.errors import Conflict
from keymem.services.memory.migration import reembed_all, spaces
from tests.full_stack import full_stack
from tests.graph_helpers import open_graph
from tests.supervised import Deployment, deployment_env

FOREIGN = "random:test-space"
FACTS = [
    ("Newton saw an apple fall", ["apple", "gravity"]),
    ("The user likes strawberries", ["strawberry", "fruit"]),
]


def seed_foreign_graph(home: Path) -> None:
    """A graph whose key vectors come from another model (random 512-d vectors)."""
    rng = np.random.default_rng(7)
    graph = open_graph(home)
    try:
        for content, keys in FACTS:
            vectors = rng.standard_normal((len(keys), 512)).astype(np.float32)
            graph.remember(
                {"content": content, "keys": keys, "key_vectors": vectors, "fingerprint": FOREIGN}
            )
    finally:
        graph.close()


def test_reembedding_moves_every_key_into_the_embedders_space(tmp_path: Path) -> None:
    seed_foreign_graph(tmp_path)
    with full_stack(tmp_path) as running:
        found = spaces(running.client)
        assert found.mismatch and found.graph == {"fingerprint": FOREIGN, "dim": 512}
        with pytest.raises(Conflict, match="re-embed"):
            running.memory("remember", {"content": "tea in the morning", "keys": ["tea"]})
        seen: list[tuple[int, int]] = []
        report = reembed_all(running.client, lambda done, total: seen.append((done, total)))
        assert report["replaced"] == 4 and seen[-1] == (4, 4)
        assert Path(report["backup"]).exists()
        assert not spaces(running.client).mismatch
        # the vectors are real now: a Korean query meets the English key
        found_keys = running.memory("recall", {"query": "딸기"})["keys"]
        assert found_keys and found_keys[0]["concept"] == "strawberry"
        assert running.memory("remember", {"content": "tea in the morning", "keys": ["tea"]})


@pytest.mark.supervised
def test_up_refuses_or_migrates_a_switched_model(short_home: Path) -> None:
    seed_foreign_graph(short_home)
    refusing = Deployment(short_home, deployment_env(short_home, KEYMEM_AUTO_MIGRATE="false"))
    try:
        refused = refusing.keymem("up", check=False)
        assert refused.returncode == 1
        assert FOREIGN in refused.stderr and "keymem migrate" in refused.stderr
        migrating = Deployment(short_home, deployment_env(short_home))
        migrated = migrating.keymem("up")
        assert "re-embedding keys: 4/4" in migrated.stderr
        again = migrating.keymem("migrate")
        assert "nothing to do" in again.stdout
    finally:
        refusing.keymem("down", check=False)


def test_keys_created_during_the_migration_are_staged_by_another_pass(tmp_path: Path) -> None:
    seed_foreign_graph(tmp_path)
    with full_stack(tmp_path) as running:
        written: list[str] = []

        def write_once_mid_migration(done: int, total: int) -> None:
            if not written:  # a writer that still uses the old model sneaks a new key in
                vector = np.random.default_rng(3).standard_normal((1, 512)).astype(np.float32)
                saved = running.client.call(
                    "graph",
                    "remember",
                    {
                        "content": "Kiwis are fuzzy",
                        "keys": ["kiwi"],
                        "key_vectors": vector,
                        "fingerprint": FOREIGN,
                    },
                )
                written.append(saved["saved"])

        report = reembed_all(running.client, write_once_mid_migration)
        assert report["replaced"] == 5  # the four seeded keys and the one written meanwhile
        found = running.memory("recall", {"query": "키위"})["keys"]
        assert found and found[0]["concept"] == "kiwi"
