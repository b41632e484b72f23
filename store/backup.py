"""Consistent snapshot files of the graph, with rotation.

Taken by the process that owns the file: after a CHECKPOINT the database file holds every
committed transaction and nothing else, and since the owner is single-threaded no write can
land while the bytes are copied. The copy is written beside its final name and renamed, so a
crash never leaves a half-written backup that looks complete.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from store.database import GraphStore

BACKUP_DIR_NAME = "backups"
BACKUPS_KEPT = 5
BACKUP_PREFIX = "graph-"
BACKUP_SUFFIX = ".duckdb"


def backup_dir(home: Path) -> Path:
    return home / BACKUP_DIR_NAME


def take_backup(
    store: GraphStore, directory: Path, *, tag: str = "", keep: int = BACKUPS_KEPT
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    store.checkpoint()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{time.time_ns() % 1_000_000:06d}"
    name = f"{BACKUP_PREFIX}{stamp}{'-' + tag if tag else ''}{BACKUP_SUFFIX}"
    final = directory / name
    partial = directory / (name + ".partial")
    shutil.copyfile(store.path, partial)
    with open(partial, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(partial, final)
    rotate(directory, keep)
    return final


def rotate(directory: Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` backups; returns the deleted files."""
    backups = sorted(directory.glob(f"{BACKUP_PREFIX}*{BACKUP_SUFFIX}"))
    doomed = backups[: max(0, len(backups) - keep)]
    for path in doomed:
        path.unlink(missing_ok=True)
    return doomed
