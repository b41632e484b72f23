"""Keeping the index equal to the graph's active memories: the Clone pattern over the change feed.

The graph owns the memories; the lexicon's index is derived state (architecture invariant 2).
The graph serves, through the router:

* ``feed_head {}`` -> ``{"seq", "epoch"}``; the epoch changes when the database is replaced.
* ``feed_snapshot {"after", "limit"}`` -> ``{"documents", "next"}``: active memories by id, paged.
* ``feed_since {"seq", "limit"}`` -> ``{"events", "head", "epoch"}``: events with a sequence
  number above ``seq``, in order; ``conflict`` with ``{"resnapshot": true}`` when that history
  is no longer kept. ``head`` is read together with the events.

The follower reads the head S0, pages the snapshot (upserting every document and remembering
its id), removes every indexed id the snapshot did not contain, and then applies events after
S0. Upserts replace and deletes are idempotent, so events that overlap the snapshot converge;
events at or below the applied sequence number are skipped, so none is applied twice. A
restart resumes from the cache's ``(epoch, seq)``; a changed epoch, a head behind us, or a
``conflict`` starts a fresh snapshot, which re-tokenizes only documents whose text digest
changed.

All work runs on the worker's serving thread in slices bounded by a time budget, so heartbeats
keep flowing while a large snapshot is applied. A slice fetches at most one page or batch and
then applies queued items until the budget is spent; the rest waits for the next slice.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from keymem.protocol.errors import Conflict, DeadlineExceeded, KeymemError, Unavailable
from keymem.services.lexicon.bulk import BulkBuilder
from keymem.services.lexicon.index import DIGEST_BYTES, LexiconIndex
from keymem.services.lexicon.journal import Journal

log = logging.getLogger("keymem.lexicon.sync")

SNAPSHOT_PAGE_DOCS = 2000  # the feed's maximum page
EVENT_BATCH = 2000  # events per feed_since call (the feed allows up to 5000)
KEY_SEPARATOR = "\n"

# (method, body, timeout in ms) -> the graph's reply; raises KeymemError subclasses.
FeedCall = Callable[[str, dict[str, Any], int], Any]
Analyse = Callable[[str], list[str]]


class Phase(StrEnum):
    START = "start"  # ask for the head, then resume or snapshot
    SNAPSHOT = "snapshot"  # paging the graph's active memories
    LIVE = "live"  # following events


class FeedError(KeymemError):
    """The graph answered something that does not follow the feed contract."""


def document_text(doc: dict[str, Any]) -> str:
    """What a memory is indexed as: its keys, then its content."""
    keys = doc.get("keys") or []
    return KEY_SEPARATOR.join([*(str(k) for k in keys), str(doc.get("content") or "")])


def text_digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=DIGEST_BYTES).digest()


@dataclass
class SyncStats:
    tokenized: int = 0  # documents run through the tokenizer
    unchanged: int = 0  # upserts skipped because the text digest matched
    events: int = 0
    snapshots: int = 0
    malformed: int = 0
    errors: int = 0
    last_error: str | None = None
    caught_up_at: float | None = None  # monotonic time the index last reached the head


class FeedFollower:
    """Applies the graph's snapshot and change feed to a ``LexiconIndex``."""

    def __init__(
        self,
        index: LexiconIndex,
        analyse: Analyse,
        call: FeedCall,
        *,
        call_timeout_ms: int,
        retry_after_s: float,
        journal: Journal,
        epoch: str | None = None,
        seq: int = 0,
    ) -> None:
        self.index = index
        self.journal = journal  # records what is applied while the index continues the cache
        self.analyse = analyse
        self.call = call
        self.call_timeout_ms = call_timeout_ms
        self.retry_after_s = retry_after_s
        self.phase = Phase.START
        # (epoch, seq) the index reflects, when ``synced``: every event <= seq is applied.
        self.epoch = epoch
        self.seq = seq
        self.synced = epoch is not None
        self.head = seq
        self.changed = False  # since the last cache save
        self.stats = SyncStats()
        self._queue: deque[tuple[str, Any]] = deque()
        self._snapshot_epoch = ""
        self._snapshot_seq = 0
        self._snapshot_after: str | None = None
        self._seen: set[str] = set()
        # a snapshot into an empty index is gathered here and loaded at its end (bulk.py)
        self._bulk: BulkBuilder | None = None
        self._bulk_refused = False  # a bulk load failed: this follower indexes per document
        self._retry_at = 0.0

    # -- driving -------------------------------------------------------------------------------
    def tick(self, budget_s: float) -> None:
        """One slice of work from the serving loop; feed errors are logged and retried later."""
        if time.monotonic() < self._retry_at:
            return
        self._guarded_step(time.monotonic() + budget_s)

    def catch_up(self, min_seq: int, budget_s: float) -> bool:
        """Work until every event up to ``min_seq`` is applied or the budget is spent."""
        deadline = time.monotonic() + budget_s
        while not self.reached(min_seq):
            if time.monotonic() >= deadline or not self._guarded_step(deadline, behind=True):
                break
            if self.at_head:  # the graph never committed ``min_seq``: nothing to wait for
                break
        return self.reached(min_seq)

    @property
    def at_head(self) -> bool:
        """Whether everything the graph reported committed, as of the last fetch, is applied."""
        return self.consistent and not self._queue and self.seq >= self.head

    def reached(self, min_seq: int) -> bool:
        return self.synced and self.phase is Phase.LIVE and self.seq >= min_seq

    @property
    def busy(self) -> bool:
        """Whether there is known work left (a snapshot in progress or queued items)."""
        return not self.consistent or bool(self._queue)

    @property
    def consistent(self) -> bool:
        """Whether the index is exactly the graph's state at ``(epoch, seq)`` (cacheable)."""
        return self.synced and self.phase is Phase.LIVE

    def _guarded_step(self, deadline: float, *, behind: bool = False) -> bool:
        try:
            self._step(deadline, behind=behind)
            return True
        except Conflict as exc:
            log.warning("feed history no longer covers seq %d: re-snapshotting (%s)", self.seq, exc)
            self._restart()
        except (Unavailable, DeadlineExceeded) as exc:
            self._failed(exc, quiet=True)
        except KeymemError as exc:
            self._failed(exc, quiet=False)
        except (KeyError, TypeError, ValueError) as exc:  # a reply off the feed contract
            self._failed(FeedError(f"{type(exc).__name__}: {exc}"), quiet=False)
        return False

    def _failed(self, exc: KeymemError, *, quiet: bool) -> None:
        if self.stats.last_error != str(exc):
            (log.info if quiet else log.warning)("graph feed: %s; retrying", exc)
        self.stats.errors += 1
        self.stats.last_error = str(exc)
        self._retry_at = time.monotonic() + self.retry_after_s

    def _restart(self) -> None:
        self.phase = Phase.START
        self.synced = False
        self._queue.clear()
        self._bulk = None
        self.journal.stop()

    def _step(self, deadline: float, *, behind: bool = False) -> None:
        """Fetch at most one page or batch, then apply queued items until ``deadline``.

        ``behind``: the caller knows there are events to fetch (skip the head check)."""
        if not self._queue:
            if self.phase is Phase.START:
                self._start()
            if self.phase is Phase.SNAPSHOT:
                self._fetch_snapshot_page()
            elif self.phase is Phase.LIVE:
                self._fetch_events(behind=behind or self.head > self.seq)
        while self._queue and time.monotonic() < deadline:
            kind, item = self._queue.popleft()
            if kind == "doc":
                self._apply_snapshot_doc(item)
            elif kind == "event":
                self._apply_event(item)
            elif kind == "head":
                self._advance_to_head(item)
            elif kind == "end":
                self._finish_snapshot()
        self.journal.flush()
        self.stats.last_error = None

    def _feed(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        reply = self.call(method, body, self.call_timeout_ms)
        if not isinstance(reply, dict):
            raise FeedError(f"graph {method} replied {type(reply).__name__}, expected a map")
        return reply

    # -- phases --------------------------------------------------------------------------------
    def _start(self) -> None:
        head = self._feed("feed_head", {})
        seq, epoch = int(head["seq"]), str(head["epoch"])
        self.head = seq
        if self.synced and epoch == self.epoch and self.seq <= seq:
            self.phase = Phase.LIVE
            return
        if self.synced:
            log.info(
                "graph at epoch %s seq %d, index at %s seq %d: snapshot",
                epoch,
                seq,
                self.epoch,
                self.seq,
            )
        self.phase = Phase.SNAPSHOT
        self.synced = False
        self.journal.stop()
        self.seq = 0
        self._snapshot_epoch = epoch
        self._snapshot_seq = seq
        self._snapshot_after = None
        self._seen = set()
        self._bulk = BulkBuilder() if not len(self.index) and not self._bulk_refused else None
        self.stats.snapshots += 1

    def _fetch_snapshot_page(self) -> None:
        page = self._feed(
            "feed_snapshot", {"after": self._snapshot_after, "limit": SNAPSHOT_PAGE_DOCS}
        )
        documents = page.get("documents")
        if not isinstance(documents, list):
            raise FeedError("feed_snapshot reply has no document list")
        self._queue.extend(("doc", doc) for doc in documents)
        after = page.get("next")
        if after is None:
            self._queue.append(("end", None))
        else:
            self._snapshot_after = str(after)

    def _fetch_events(self, *, behind: bool) -> None:
        if not behind and not self._head_moved():
            return
        reply = self._feed("feed_since", {"seq": self.seq, "limit": EVENT_BATCH})
        if str(reply.get("epoch")) != self.epoch:
            log.info("graph epoch changed to %s: snapshot", reply.get("epoch"))
            self._restart()
            return
        events = reply.get("events")
        if not isinstance(events, list):
            raise FeedError("feed_since reply has no event list")
        self._queue.extend(("event", event) for event in events)
        if len(events) < EVENT_BATCH:
            self._queue.append(("head", int(reply["head"])))
        else:
            self.head = max(self.head, int(reply["head"]))  # more to fetch next time

    def _head_moved(self) -> bool:
        """An idle poll: ``feed_head`` is answered from the graph's memory, while ``feed_since``
        reads its event table, so ask for events only when the head has moved."""
        head = self._feed("feed_head", {})
        seq, epoch = int(head["seq"]), str(head["epoch"])
        if epoch != self.epoch or seq < self.seq:
            log.info("graph at epoch %s seq %d, index at seq %d: snapshot", epoch, seq, self.seq)
            self._restart()
            return False
        self.head = seq
        if seq == self.seq:
            self.stats.caught_up_at = time.monotonic()
            return False
        return True

    def _finish_snapshot(self) -> None:
        if self._bulk is not None:
            bulk, self._bulk = self._bulk, None
            try:
                bulk.install(self.index)
            except ValueError as exc:  # e.g. an id twice: the feed broke its contract
                log.warning("bulk snapshot not loaded (%s): indexing per document", exc)
                self._bulk_refused = True
                self._restart()
                return
        else:  # the documents the snapshot no longer holds
            for doc_id in [d for d in self.index.ids() if d not in self._seen]:
                self.index.remove(doc_id)
        self._seen = set()
        self.epoch = self._snapshot_epoch
        self.seq = self._snapshot_seq
        self.synced = True
        self.changed = True
        self.phase = Phase.LIVE
        log.info("snapshot applied: %d documents at seq %d", len(self.index), self.seq)

    def _advance_to_head(self, head: int) -> None:
        if head < self.seq:
            log.warning("graph head %d is behind our seq %d: snapshot", head, self.seq)
            self._restart()
            return
        if head > self.seq:
            self.seq = head
            self.changed = True
            self.journal.head(head)
        self.head = head
        self.stats.caught_up_at = time.monotonic()

    # -- applying ------------------------------------------------------------------------------
    def _apply_snapshot_doc(self, doc: Any) -> None:
        if self._bulk is not None:
            if (read := self._read(doc)) is not None:
                doc_id, namespace, text, digest = read
                self._bulk.add(doc_id, namespace, digest, Counter(self.analyse(text)))
                self.stats.tokenized += 1
            return
        if isinstance(doc, dict) and isinstance(doc.get("id"), str):
            self._seen.add(doc["id"])
        self._upsert(doc)

    def _apply_event(self, event: Any) -> None:
        if not isinstance(event, dict) or not isinstance(event.get("seq"), int):
            self.stats.malformed += 1
            return
        seq = event["seq"]
        if seq <= self.seq:
            return  # already applied (an overlapping batch, or a retry)
        op, doc_id = event.get("op"), event.get("id")
        if op == "delete" and isinstance(doc_id, str):
            self.index.remove(doc_id)
            self.journal.delete(seq, doc_id)
        elif op == "upsert" and (applied := self._upsert(event.get("doc"))) is not None:
            self.journal.upsert(seq, *applied)
        else:
            if op != "upsert":
                self.stats.malformed += 1
            self.journal.head(seq)
        self.seq = seq
        self.head = max(self.head, seq)
        self.stats.events += 1
        self.changed = True

    def _read(self, doc: Any) -> tuple[str, str, str, bytes] | None:
        """A feed document's id, namespace, indexed text and its digest; None (counted and
        logged) for a malformed one."""
        if not (
            isinstance(doc, dict)
            and isinstance(doc.get("id"), str)
            and "\x00" not in doc["id"]
            and isinstance(doc.get("content", ""), str)
            and isinstance(doc.get("keys") or [], list)
        ):
            self.stats.malformed += 1
            log.warning("skipped a malformed document from the feed: %.200r", doc)
            return None
        text = document_text(doc)
        return doc["id"], str(doc.get("namespace") or ""), text, text_digest(text)

    def _upsert(self, doc: Any) -> tuple[str, str, bytes, Counter[str]] | None:
        """Index a feed document unless its text is unchanged; what was indexed, if anything."""
        read = self._read(doc)
        if read is None:
            return None
        doc_id, namespace, text, digest = read
        if self.index.is_current(doc_id, namespace, digest):
            self.stats.unchanged += 1
            return None
        terms = Counter(self.analyse(text))
        self.index.upsert(doc_id, namespace, digest, terms)
        self.stats.tokenized += 1
        self.changed = True
        return doc_id, namespace, digest, terms

    def describe(self) -> dict[str, Any]:
        caught_up_at = self.stats.caught_up_at
        return {
            "phase": self.phase.value,
            "synced": self.synced,
            "epoch": self.epoch,
            "seq": self.seq,
            "head": self.head,
            "queued": len(self._queue),
            "tokenized": self.stats.tokenized,
            "unchanged": self.stats.unchanged,
            "events": self.stats.events,
            "snapshots": self.stats.snapshots,
            "malformed": self.stats.malformed,
            "errors": self.stats.errors,
            "last_error": self.stats.last_error,
            "caught_up_s_ago": None
            if caught_up_at is None
            else round(time.monotonic() - caught_up_at, 3),
        }
