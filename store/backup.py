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
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from keymem.store.database import GraphStore

BACKUP_DIR_NAME = "backups"
BACKUPS_KEPT = 5
BACKUP_PREFIX = "graph-"
BACKUP_SUFFIX = ".duckdb"
INTERRUPT_RETRY_S = 0.05


def backup_dir(home: Path) -> Path:
    return home / BACKUP_DIR_NAME


def _paths(directory: Path, tag: str) -> tuple[Path, Path]:
    now_us = time.time_ns() // 1_000
    seconds, micros = divmod(now_us, 1_000_000)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(seconds)) + f"-{micros:06d}"
    name = f"{BACKUP_PREFIX}{stamp}{'-' + tag if tag else ''}{BACKUP_SUFFIX}"
    return directory / name, directory / (name + ".partial")


def _write(
    store: GraphStore,
    final: Path,
    partial: Path,
    keep: int,
    conn: duckdb.DuckDBPyConnection | None = None,
) -> Path:
    store.snapshot_to(partial, conn)
    with open(partial, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(partial, final)
    rotate(final.parent, keep)
    return final


def take_backup(
    store: GraphStore, directory: Path, *, tag: str = "", keep: int = BACKUPS_KEPT
) -> Path:
    """A backup taken now, in this thread."""
    directory.mkdir(parents=True, exist_ok=True)
    final, partial = _paths(directory, tag)
    return _write(store, final, partial, keep)


@dataclass
class BackupJob:
    """A backup running on its own cursor in a background thread.

    The graph service must keep heartbeating while a large store is copied (seconds at 100k
    memories), so the copy runs beside the serving loop; DuckDB gives it a consistent snapshot
    while writes continue on the service's own connection.
    """

    path: Path
    thread: threading.Thread | None = None
    error: str | None = None
    cursor: duckdb.DuckDBPyConnection | None = None  # the copy's, while it runs

    def cancel(self) -> None:
        """Abandon a running copy (a stop that cannot wait longer): DuckDB interrupts it
        within a fraction of a second, and the partial file is removed."""
        if self.cursor is None or self.thread is None:
            return
        while self.thread.is_alive():  # an interrupt before the copy's query began is lost
            try:
                self.cursor.interrupt()
            except duckdb.Error:
                pass  # the copy ended and closed its cursor meanwhile
            self.thread.join(INTERRUPT_RETRY_S)

    @property
    def status(self) -> str:
        if self.thread is not None and self.thread.is_alive():
            return "running"
        return "failed" if self.error else "done"

    def to_wire(self) -> dict[str, Any]:
        return {"status": self.status, "path": str(self.path), "error": self.error}


def start_backup(
    store: GraphStore, directory: Path, *, tag: str = "", keep: int = BACKUPS_KEPT
) -> BackupJob:
    directory.mkdir(parents=True, exist_ok=True)
    final, partial = _paths(directory, tag)
    store.flush()  # the copy's cursor sees what DuckDB holds: every acknowledged write
    cursor = store.conn.cursor()
    job = BackupJob(final, cursor=cursor)

    def run() -> None:
        try:
            _write(store, final, partial, keep, cursor)
        except Exception as exc:
            job.error = f"{type(exc).__name__}: {exc}"
            partial.unlink(missing_ok=True)
        finally:
            cursor.close()

    job.thread = threading.Thread(target=run, name="graph-backup", daemon=True)
    job.thread.start()
    return job


def rotate(directory: Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` backups; returns the deleted files."""
    backups = sorted(directory.glob(f"{BACKUP_PREFIX}*{BACKUP_SUFFIX}"))
    doomed = backups[: max(0, len(backups) - keep)]
    for path in doomed:
        path.unlink(missing_ok=True)
    return doomed
