"""The graph's own write-ahead log: a write is durable once its record is appended and
fdatasync'ed; its rows reach DuckDB later, many writes to one transaction (write-behind).

DuckDB charges 0.7-3 ms of CPU per statement whatever its row count, and one remember is five
statements between BEGIN and COMMIT (docs/history/graph-write-transaction-2026-12-02.md),
while an append + ``fdatasync`` costs ~0.13 ms here. So the graph acknowledges a write once its
record is on disk, and ``GraphStore.flush`` folds every pending record into one DuckDB
transaction: one statement per table for all of them.

A record is ``[length u32][crc32 u32][payload]``; the payload (store/logformat.py: its first
byte the format, then fields by name) holds the file's epoch, the record's log sequence number,
the change feed's head before it, and the rows the write changed (``store.changes.Changes``,
encoded at append time, so later writes in memory never leak into an earlier record). A record
this keymem cannot read (a newer keymem's format) stops the open with ``UnreadableLog``, which
names the file and what to do: it is never cut off or skipped. The log is written and read
only by the process that holds the DuckDB file's lock, in the private home (0600), like the
file itself.
The lsn of the last record folded into DuckDB is stored in the file's meta by the same
transaction, so a record folded just before a crash that kept the log is skipped at the next
open, never applied twice.
A torn or damaged tail (an append that never returned, so was never acknowledged) is cut off.
A log written for another file (a backup restored in place, a file deleted to start afresh:
another epoch) is set aside, never applied.
"""

from __future__ import annotations

import logging
import os
import struct
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from keymem.protocol.errors import Conflict
from keymem.store import logformat
from keymem.store.changes import Changes

log = logging.getLogger("keymem.store")

LOG_FILE_MODE = 0o600
LOG_SUFFIX = ".writes"
HEADER = struct.Struct("<II")  # payload length, crc32 of the payload
# The meta row holding the lsn of the last record folded into DuckDB.
APPLIED_META = "log_applied"


def log_path(graph_file: Path) -> Path:
    """The log beside the graph's DuckDB file (``graph.duckdb`` -> ``graph.writes``)."""
    return graph_file.with_suffix(LOG_SUFFIX)


@dataclass(frozen=True, slots=True)
class Record:
    """One logged write: its payload as written, and its feed events for readers of the feed
    before it reaches DuckDB."""

    lsn: int
    head_seq: int  # the feed head before this write; its events follow it
    payload: bytes
    events: tuple[tuple[str, str, str], ...]

    def changes(self) -> Changes:
        """The rows as they were when the write was acknowledged (a fresh copy each call)."""
        return logformat.decode(self.payload)[3]


class UnreadableLog(Conflict):
    """A logged record this keymem cannot read: the graph does not start without it."""


class WriteLog:
    def __init__(self, path: Path, epoch: str) -> None:
        self.path = path
        self.epoch = epoch  # the DuckDB file's: records of another file's are not applied
        self.fd = self._open()
        self.size = 0
        self.next_lsn = 1

    def _open(self) -> int:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, LOG_FILE_MODE)
        os.fchmod(fd, LOG_FILE_MODE)
        return fd

    def _set_aside(self) -> None:
        """Keep another file's log under another name, and start an empty one."""
        aside = self.path.with_name(f"{self.path.name}.other-{int(time.time())}")
        log.warning("%s was written for another graph file; kept as %s", self.path, aside)
        os.close(self.fd)
        os.replace(self.path, aside)
        self.fd = self._open()

    def read(self, applied_lsn: int) -> list[Record]:
        """The records after ``applied_lsn``, in order; a torn or damaged tail is cut off."""
        data = os.pread(self.fd, os.fstat(self.fd).st_size, 0)
        records: list[Record] = []
        offset, last_lsn = 0, applied_lsn
        while offset + HEADER.size <= len(data):
            length, crc = HEADER.unpack_from(data, offset)
            payload = data[offset + HEADER.size : offset + HEADER.size + length]
            if len(payload) < length or zlib.crc32(payload) != crc:
                break
            try:
                epoch, lsn, head_seq, changes = logformat.decode(payload)
            except logformat.LogFormatError as exc:
                raise self._unreadable(payload, exc) from exc
            if epoch != self.epoch:
                self._set_aside()
                return []
            offset += HEADER.size + length
            last_lsn = max(last_lsn, lsn)
            if lsn > applied_lsn:
                records.append(Record(lsn, head_seq, payload, tuple(changes.events)))
        if offset < len(data):
            log.warning(
                "%s: %d bytes after the last whole record cut off (an unacknowledged append)",
                self.path,
                len(data) - offset,
            )
            os.ftruncate(self.fd, offset)
            os.fsync(self.fd)
        self.size = offset
        self.next_lsn = last_lsn + 1
        return records

    def _unreadable(self, payload: bytes, exc: logformat.LogFormatError) -> UnreadableLog:
        version = logformat.format_of(payload) if payload else None
        return UnreadableLog(
            f"{self.path} holds acknowledged writes this keymem cannot read (record format "
            f"{version}: {exc}); it reads formats 1 and {logformat.FORMAT}. Start the keymem "
            f"that wrote them once (it folds them into the graph file and empties the log), "
            f"then this one; or move {self.path.name} aside to start without those writes.",
            {"path": str(self.path), "format": version, "reads": [1, logformat.FORMAT]},
        )

    def append(self, head_seq: int, changes: Changes) -> Record:
        """Write one record and wait for it to be on disk. On failure (a full disk) the log is
        cut back to where it was, and the error raised: the write was not saved."""
        lsn = self.next_lsn
        payload = logformat.encode(self.epoch, lsn, head_seq, changes)
        framed = HEADER.pack(len(payload), zlib.crc32(payload)) + payload
        try:
            view = memoryview(framed)
            while view:
                view = view[os.write(self.fd, view) :]
            os.fdatasync(self.fd)
        except OSError:
            try:
                os.ftruncate(self.fd, self.size)
            except OSError:
                log.exception("%s: cannot cut a failed append back", self.path)
            raise
        self.size += len(framed)
        self.next_lsn = lsn + 1
        return Record(lsn, head_seq, payload, tuple(changes.events))

    def reset(self) -> None:
        """Empty the log once DuckDB holds every record (a crash before this only means the
        next open skips the folded records by their lsn)."""
        os.ftruncate(self.fd, 0)
        os.fsync(self.fd)
        self.size = 0

    def close(self) -> None:
        os.close(self.fd)
