"""The event journal: what keymem did, one append-only JSON-lines file per day and process kind.

The graph service owns the DuckDB file and nothing else may write it (invariant 1), so the
journal is not a table there: each recording process (``graph`` for writes, reads, learning,
sweeps and sleep; ``memory`` for recall, search and inject with their latency) keeps events in
memory and appends them to ``KEYMEM_HOME/journal/<UTC day>.<source>.jsonl`` from a timer of
its serving loop, after the requests that produced them were answered. Recording costs a
lock and a list append on the request path; a file write happens once per flush interval.
A day file is closed to new lines at ``DAY_FILE_MAX_BYTES``, and the graph's hourly
maintenance deletes days older than ``RETENTION_DAYS``. docs/OBSERVABILITY.md lists the events.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

log = logging.getLogger("keymem.journal")

JOURNAL_DIR = "journal"
FILE_SUFFIX = ".jsonl"
# Raw events are kept this long: `keymem report`'s default window (30 days) and some slack.
RETENTION_DAYS = 35
# A day file stops growing here (~400k events of ~160 bytes); later events that day are dropped.
DAY_FILE_MAX_BYTES = 64 << 20
# Events wait in memory at most this long before they are appended.
FLUSH_INTERVAL_S = 1.0
# Events held between flushes; beyond this (a flush that cannot keep up) the oldest are dropped.
BUFFER_MAX_EVENTS = 20_000
TIME_DIGITS = 3
SOURCES = ("graph", "memory")

Event = dict[str, Any]


def journal_dir(home: Path) -> Path:
    return home / JOURNAL_DIR


def day_of(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d")


class Journal:
    """One process's recorder. ``record`` is safe from any thread and does no I/O."""

    def __init__(self, home: Path, source: str, clock: Callable[[], float] = time.time) -> None:
        if source not in SOURCES:
            raise ValueError(f"journal source must be one of {SOURCES}, got {source!r}")
        self.directory = journal_dir(home)
        self.source = source
        self.clock = clock
        self.lock = threading.Lock()
        self.pending: list[Event] = []
        self.dropped = 0
        self.full_days: set[str] = set()

    def record(self, kind: str, **fields: Any) -> None:
        """Note that ``kind`` happened now; ``fields`` are JSON scalars (counts, ms, flags)."""
        event = {"t": round(self.clock(), TIME_DIGITS), "kind": kind, **fields}
        with self.lock:
            if len(self.pending) >= BUFFER_MAX_EVENTS:
                del self.pending[0]
                self.dropped += 1
            self.pending.append(event)

    def flush(self) -> None:
        """Append what was recorded since the last flush."""
        with self.lock:
            events, self.pending = self.pending, []
        if not events:
            return
        by_day: dict[str, list[str]] = {}
        for event in events:
            line = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
            by_day.setdefault(day_of(event["t"]), []).append(line)
        written = 0
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            for day, lines in by_day.items():
                written += self._append(day, lines)
        except OSError as exc:  # a full disk must not take the service down
            log.warning("journal: %d events not written: %s", len(events) - written, exc)

    def _append(self, day: str, lines: list[str]) -> int:
        path = self.directory / f"{day}.{self.source}{FILE_SUFFIX}"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size >= DAY_FILE_MAX_BYTES:
                if day not in self.full_days:
                    self.full_days.add(day)
                    log.warning(
                        "journal: %s reached %d bytes; the day's rest is dropped",
                        path,
                        DAY_FILE_MAX_BYTES,
                    )
                return 0
            os.write(fd, ("\n".join(lines) + "\n").encode())
        finally:
            os.close(fd)
        return len(lines)


def prune(home: Path, now: float, retention_days: int = RETENTION_DAYS) -> int:
    """Delete day files older than ``retention_days``; returns how many went."""
    oldest_kept = day_of(now - timedelta(days=retention_days).total_seconds())
    removed = 0
    for path in _day_files(home):
        if path.name[:10] < oldest_kept:
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def _day_files(home: Path) -> list[Path]:
    try:
        return sorted(journal_dir(home).glob(f"????-??-??.*{FILE_SUFFIX}"))
    except OSError:
        return []


def read_events(home: Path, since: float, until: float | None = None) -> Iterator[Event]:
    """Every journalled event with ``since <= t < until`` (any source, file order).

    A torn last line (a process killed mid-write) or a line that is not an event is skipped.
    """
    first_day = day_of(since)
    last_day = day_of(until) if until is not None else None
    for path in _day_files(home):
        day = path.name[:10]
        if day < first_day or (last_day is not None and day > last_day):
            continue
        source = path.name[11 : -len(FILE_SUFFIX)]
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict) or not isinstance(event.get("t"), int | float):
                continue
            if event["t"] < since or (until is not None and event["t"] >= until):
                continue
            event["source"] = source
            yield event
