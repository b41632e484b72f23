"""The lexicon's change journal: what the index applied since its last cache save, as terms.

Why: after a ``kill -9`` the next worker loads the cache, and every feed change since the
cache's seq would otherwise go through Kiwi again (~1-5 ms a memory, more under load: 30 s of
writes between two saves is seconds of catch-up). The journal records each applied change with
its term counts, so a restart replays it with no tokenizer; the feed then supplies only what
the journal missed.

Files: ``terms.journal`` (current) and ``terms.journal.old`` (what the cache save in flight
covers). Each file starts with a base record ``{"epoch", "seq"}``, the state it continues, then
one record per applied change: ``{"seq", "op": "upsert", "id", "ns", "digest", "terms"}``,
``{"seq", "op": "delete", "id"}`` or ``{"seq", "op": "head"}`` (the seq moved with no change).
A record is a little-endian u32 length, a u32 CRC-32 and the msgpack body; a torn or corrupt
record ends the file (what follows is ignored, the feed supplies it). Writes are flushed to the
OS after each sync slice: a killed process loses nothing flushed, a machine crash may lose a
tail, and replay stops at the first record it cannot read, which is always a consistent prefix.

Capturing a cache snapshot at seq S rotates: the current file becomes ``.old`` and a new one
starts at base S; a completed save deletes ``.old``. Replay follows the chain from the file
whose base is the cache's ``(epoch, seq)``: ``.old`` then the current file, or the current file
alone. A re-snapshot (lost history, new epoch) stops journaling until the next save.
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import msgpack

from keymem.services.lexicon.index import LexiconIndex

log = logging.getLogger("keymem.lexicon.journal")

JOURNAL_FILE = "terms.journal"
_FRAME = struct.Struct("<II")  # body length, CRC-32 of the body


def _read(path: Path) -> Iterator[dict[str, Any]]:
    """The readable records of one file, in order; stops at the first torn or corrupt one."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return
    at = 0
    while at + _FRAME.size <= len(raw):
        length, crc = _FRAME.unpack_from(raw, at)
        body = raw[at + _FRAME.size : at + _FRAME.size + length]
        if len(body) != length or zlib.crc32(body) != crc:
            return
        try:
            record = msgpack.unpackb(body, raw=False)
        except ValueError:
            return
        if not isinstance(record, dict):
            return
        yield record
        at += _FRAME.size + length


class Journal:
    """Appends the changes the feed follower applies; replays them into a loaded index."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / JOURNAL_FILE
        self.old = directory / f"{JOURNAL_FILE}.old"
        self._out: IO[bytes] | None = None
        # records since the last rotate (or replayed at load): what a restart after the
        # save in flight would replay
        self.records = 0

    @property
    def active(self) -> bool:
        return self._out is not None

    # -- writing -------------------------------------------------------------------------------
    def rotate(self, epoch: str, seq: int) -> None:
        """A cache snapshot at ``(epoch, seq)`` was taken: keep what it may still need, start
        a new file continuing from it."""
        self._close()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists():
                self.path.replace(self.old)
            self._out = open(self.path, "wb")  # noqa: SIM115 - appended to until the next rotate
            self._write({"epoch": epoch, "seq": seq})
            self.records = 0
        except OSError as exc:
            self._failed(exc)

    def saved(self) -> None:
        """The snapshot of the last ``rotate`` is on disk: the previous file is not needed."""
        self.old.unlink(missing_ok=True)

    def upsert(
        self, seq: int, doc_id: str, namespace: str, digest: bytes, terms: Mapping[str, int]
    ) -> None:
        self._write(
            {
                "seq": seq,
                "op": "upsert",
                "id": doc_id,
                "ns": namespace,
                "digest": digest,
                "terms": dict(terms),
            }
        )

    def delete(self, seq: int, doc_id: str) -> None:
        self._write({"seq": seq, "op": "delete", "id": doc_id})

    def head(self, seq: int) -> None:
        self._write({"seq": seq, "op": "head"})

    def flush(self) -> None:
        if self._out is not None:
            try:
                self._out.flush()
            except OSError as exc:
                self._failed(exc)

    def stop(self) -> None:
        """Journaling is off (the index no longer continues the cache): drop every file."""
        self._close()
        self.path.unlink(missing_ok=True)
        self.old.unlink(missing_ok=True)

    def _write(self, record: dict[str, Any]) -> None:
        if self._out is None:
            return
        body = msgpack.packb(record, use_bin_type=True)
        try:
            self._out.write(_FRAME.pack(len(body), zlib.crc32(body)) + body)
            self.records += 1
        except OSError as exc:
            self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        log.warning("lexicon journal off until the next cache save: %s", exc)
        self.stop()

    def _close(self) -> None:
        if self._out is not None:
            out, self._out = self._out, None
            try:
                out.close()
            except OSError as exc:
                log.warning("closing the lexicon journal: %s", exc)

    # -- replay --------------------------------------------------------------------------------
    def replay(self, index: LexiconIndex, epoch: str, seq: int) -> tuple[int, int]:
        """Apply the chain of records continuing ``(epoch, seq)`` (the loaded cache) to
        ``index``; the seq reached and the records applied. Journaling then continues in the
        current file if the chain reached it, else it is off until the next save."""
        seq, applied, reached_current = self._follow(index, epoch, seq)
        self.records = applied
        if reached_current:
            try:
                self._out = open(self.path, "ab")  # noqa: SIM115 - appended to until rotate
            except OSError as exc:
                self._failed(exc)
        else:
            self.stop()
        return seq, applied

    def apply(self, index: LexiconIndex, epoch: str, seq: int) -> int:
        """Apply the records written since ``(epoch, seq)`` to another ``index`` (one just
        loaded from the cache saved there) while journaling goes on; the seq reached."""
        self.flush()
        reached, _, _ = self._follow(index, epoch, seq)
        return reached

    def _follow(self, index: LexiconIndex, epoch: str, seq: int) -> tuple[int, int, bool]:
        """The seq reached, the records applied and whether the chain reached the current
        file."""
        applied = 0
        reached_current = False
        for path in (self.old, self.path):
            records = _read(path)
            base = next(records, None)
            if base is None or base.get("epoch") != epoch or base.get("seq") != seq:
                continue
            for record in records:
                if not _apply(index, record):
                    break
                seq = record["seq"]
                applied += 1
            reached_current = path == self.path
        return seq, applied, reached_current


def _apply(index: LexiconIndex, record: dict[str, Any]) -> bool:
    """Apply one record; False (and nothing changed) if it is not one this module writes."""
    op, doc_id = record.get("op"), record.get("id")
    if not isinstance(record.get("seq"), int):
        return False
    if op == "head":
        return True
    if not isinstance(doc_id, str):
        return False
    if op == "delete":
        index.remove(doc_id)
        return True
    terms, namespace, digest = record.get("terms"), record.get("ns"), record.get("digest")
    if op != "upsert" or not isinstance(terms, dict) or not isinstance(namespace, str):
        return False
    if not isinstance(digest, bytes):
        return False
    try:
        index.upsert(doc_id, namespace, digest, terms)
    except (TypeError, ValueError):
        return False
    return True
