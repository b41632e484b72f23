"""Consistent snapshot files of the graph, with rotation.

Taken by the process that owns the file, through its own connection: the snapshot database
is ATTACHed and filled with ``COPY FROM DATABASE`` (a consistent read of committed data), never
by copying the file's bytes. Copying would open a second descriptor on the live file, and
closing it drops the process's POSIX lock, letting a second process open the file. The copy
is written beside its final name and renamed, so a crash never leaves a half-written backup
that looks complete.
"""

from __future__ import annotations

import os
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
    now_us = time.time_ns() // 1_000
    seconds, micros = divmod(now_us, 1_000_000)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(seconds)) + f"-{micros:06d}"
    name = f"{BACKUP_PREFIX}{stamp}{'-' + tag if tag else ''}{BACKUP_SUFFIX}"
    final = directory / name
    partial = directory / (name + ".partial")
    store.snapshot_to(partial)
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
