"""The lexicon worker: search, tokenize and extract_keys over the index the feed keeps current.

``preload`` loads and warms Kiwi, once per supervised process (its workers are forked from
it, services/prefork.py); the service it then builds loads the term cache before the worker
registers, so the first request pays neither. Sync work runs from the serving loop in slices
sized from the heartbeat policy: a slice (or a read-your-writes wait inside ``search``) never
holds the loop long enough for the router to declare the worker dead. docs/LEXICON.md
documents the methods.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import BadRequest
from keymem.protocol.fields import body_of, opt_bool, opt_int, opt_int_or_none, req_str
from keymem.protocol.limits import COVERAGE_MAX_IDS, NAMESPACE_MAX_CHARS, QUERY_MAX_CHARS
from keymem.protocol.worker import HeartbeatPolicy, Service, remaining_ms
from keymem.services.config import Settings
from keymem.services.lexicon import cache
from keymem.services.lexicon.index import LexiconIndex
from keymem.services.lexicon.journal import Journal
from keymem.services.lexicon.keys import DEFAULT_LIMIT, MAX_LIMIT, extract_keys
from keymem.services.lexicon.sync import FeedFollower
from keymem.services.lexicon.tokenizer import TOKENIZER_VERSION, Tokenizer, shared_tokenizer

log = logging.getLogger("keymem.lexicon")

SERVICE_NAME = "lexicon"
GRAPH_SERVICE = "graph"
MAX_TEXT_CHARS = 262_144  # extract_keys input; Kiwi takes ~1 s per 200k chars
DEFAULT_TOP_N = 10
MAX_TOP_N = 1000
DEFAULT_WAIT_MS = 1000  # how long search waits for min_seq by default
MAX_SLICE_S = 0.25  # longest sync slice between two passes of the serving loop
SLICE_SHARE_OF_EXPIRY = 0.15  # ... and at most this share of the heartbeat expiry
WAIT_SHARE_OF_EXPIRY = 0.3  # a read-your-writes wait holds the loop at most this share
WAIT_SHARE_OF_DEADLINE = 0.5  # ... and at most this share of the request's remaining time
SYNC_INTERVAL_S = 0.02  # the sync timer runs on (almost) every pass of the loop
# Once caught up, ask the feed for news after IDLE_POLL_S, doubling while the head stays still,
# up to IDLE_POLL_MAX_S. Reads through the memory service carry the newest write's seq and
# catch up themselves; the poll only applies the rest early (writes that reach the graph
# otherwise: imports, sleep passes). Each poll is a round trip through the router to the
# graph (~13 ms of CPU per idle second at 0.1 s, docs/history/reliability-2026-12-02d.md).
IDLE_POLL_S = 0.1
IDLE_POLL_MAX_S = 2.0
RETRY_AFTER_S = 1.0  # after the graph was unreachable
CACHE_SAVE_INTERVAL_S = 30.0  # between saves while the journal holds the changes since
# ... and then only once the feed has stood still this long (the writes paused; one client's
# back-to-back batches leave < 0.5 s between them, docs/history/batch-rate-2026-12-02e.md):
# at 1M a save is ~0.5 s of CPU and a 170 MB file written and fsynced, which a burst of
# writes would otherwise carry, its durable appends' fsyncs queued behind it
SAVE_WHEN_STILL_S = 1.0
# ... or once the journal holds this many records whatever the writes do: a restart replays
# them at ~0.1 ms each (3 s), as many as 30 s of writes at the 1,000/s goal
JOURNAL_MAX_RECORDS = 30_000
CACHE_RETRY_S = 5.0  # after a failed save of a state nothing on disk holds
# the background save's thread runs this much nicer than the process: writes met by a save
# (one that started in a pause) keep the cores first
SAVER_NICE_STEP = 10
NICE_MAX = 19


def release_free_memory() -> None:
    """Hand the C heap's free pages back to the OS: glibc keeps what a dropped index freed
    (numpy arrays below its mmap threshold, Python's arenas) in the process otherwise."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc's; absent elsewhere
    if trim is not None:
        trim(0)


def _text(body: dict[str, Any], name: str, max_chars: int) -> str:
    """A required text that may be blank: searching for nothing finds nothing."""
    return req_str(body, name, max_chars, blank=True)


class Lexicon:
    """The service's state: tokenizer, index, feed follower and cache bookkeeping."""

    def __init__(self, settings: Settings, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.frontend = settings.endpoints.frontend
        self.cache_file = cache.cache_path(settings.home)
        self.slice_s, self.max_wait_s = self._budgets(settings.heartbeat)
        self.index = LexiconIndex()
        self._client: Client | None = None
        self.cache_state: dict[str, Any] = {"path": str(self.cache_file)}
        self.journal = Journal(self.cache_file.parent)
        # whether the cache file is the base of the journal's chain: then the two together
        # are the index, and a stop needs only the journal flushed
        self._saved_base = False
        epoch, seq = self._load_cache()
        self.follower = FeedFollower(
            self.index,
            tokenizer.tokenize,
            self._call_graph,
            call_timeout_ms=max(1, int(self.max_wait_s * 1000)),
            retry_after_s=RETRY_AFTER_S,
            journal=self.journal,
            epoch=epoch,
            seq=seq,
        )
        self._next_poll = 0.0
        self._idle_poll_s = IDLE_POLL_S
        self._last_save = self._moved_at = time.monotonic()
        self._seen_seq = self.follower.seq  # as of the last sync turn (``_moved_at``)
        self._polled_at = 0.0  # the last turn that asked the feed
        self._failed_at: float | None = None  # the last save's failure, if it failed
        self._saver: threading.Thread | None = None
        # the saved cache, mapped by the saver, that replaces a heap-built index (a first
        # index, a re-snapshot) on the serving thread: (index, epoch, seq of the save)
        self._mapped: tuple[LexiconIndex, str, int] | None = None
        self._closing = False  # stopping: a save in flight skips mapping what it wrote

    @staticmethod
    def _budgets(heartbeat: HeartbeatPolicy) -> tuple[float, float]:
        expiry_s = heartbeat.expiry_ms / 1000
        return min(MAX_SLICE_S, SLICE_SHARE_OF_EXPIRY * expiry_s), WAIT_SHARE_OF_EXPIRY * expiry_s

    # -- cache ---------------------------------------------------------------------------------
    def _load_cache(self) -> tuple[str | None, int]:
        started = time.perf_counter()
        cache.remove_partial(self.cache_file)
        try:
            info = cache.load(self.cache_file, self.index, tokenizer=TOKENIZER_VERSION)
        except cache.CacheInvalid as exc:
            log.info("lexicon cache not used (%s): building from the graph", exc)
            self.cache_state["loaded"] = False
            self.cache_state["reason"] = str(exc)
            self.journal.stop()
            return None, 0
        loaded_s = time.perf_counter() - started
        seq, replayed = self.journal.replay(self.index, info.epoch, info.seq)
        elapsed = time.perf_counter() - started
        log.info(
            "lexicon cache: %d documents at epoch %s seq %d in %.2f s, %d journal records "
            "to seq %d in %.2f s",
            info.documents,
            info.epoch,
            info.seq,
            loaded_s,
            replayed,
            seq,
            elapsed - loaded_s,
        )
        self._saved_base = self.journal.active
        self.cache_state.update(
            loaded=True,
            documents=info.documents,
            seq=info.seq,
            load_s=round(loaded_s, 3),
            journal_records=replayed,
            journal_seq=seq,
            journal_s=round(elapsed - loaded_s, 3),
        )
        return info.epoch, seq

    @property
    def covered(self) -> bool:
        """Whether the cache file and the journal continuing it hold the index (a restart
        loads them); not so after a first index or a re-snapshot until a save completes."""
        return self._saved_base and self.journal.active

    def _save_due(self, now: float) -> bool:
        if self._saver is not None and self._saver.is_alive():
            return False
        if not self.covered:  # only this process holds the index: save it at once
            return self._failed_at is None or now - self._failed_at >= CACHE_RETRY_S
        if now - self._last_save < CACHE_SAVE_INTERVAL_S:
            return False
        return (
            now - self._moved_at >= SAVE_WHEN_STILL_S or self.journal.records >= JOURNAL_MAX_RECORDS
        )

    def save_cache(self, *, wait: bool = False) -> None:
        """Write the cache if the index changed and is consistent.

        Only capturing the snapshot runs here; building the arrays and writing happen on a
        background thread (at 1M documents that is seconds the serving loop must not spend).
        With ``wait`` (on stop) everything runs here, after any write still in flight. A save
        of a state nothing on disk held (a first index, a re-snapshot: the index is heap
        arrays) also maps the file it wrote, and the serving thread then swaps that in.
        """
        if self._saver is not None and self._saver.is_alive():
            if not wait:
                return
            self._saver.join()
        follower = self.follower
        if not (follower.changed and follower.consistent and follower.epoch is not None):
            return
        remap = not self.covered and not wait
        snap = cache.snapshot(
            self.index, tokenizer=TOKENIZER_VERSION, epoch=follower.epoch, seq=follower.seq
        )
        self.journal.rotate(follower.epoch, follower.seq)
        follower.changed = False
        self._last_save = time.monotonic()
        if wait:
            self._write_cache(snap, remap=False)
        else:
            self._saver = threading.Thread(
                target=self._write_in_background,
                args=(snap, remap),
                name="lexicon-cache",
                daemon=True,
            )
            self._saver.start()

    def _write_in_background(self, snap: cache.Snapshot, remap: bool) -> None:
        thread = threading.get_native_id()  # Linux: a thread's nice value is its own
        with contextlib.suppress(OSError):
            nice = os.getpriority(os.PRIO_PROCESS, thread) + SAVER_NICE_STEP
            os.setpriority(os.PRIO_PROCESS, thread, min(NICE_MAX, nice))
        self._write_cache(snap, remap)

    def _write_cache(self, snap: cache.Snapshot, remap: bool) -> None:
        started = time.perf_counter()
        try:
            info = cache.write(self.cache_file, snap)
        except (OSError, ValueError) as exc:
            log.warning("could not write the lexicon cache %s: %s", self.cache_file, exc)
            self.follower.changed = True
            self._saved_base = False  # the next rotate drops the chain from the older file
            self._failed_at = time.monotonic()
            return
        self.journal.saved()
        self._saved_base = True
        self._failed_at = None
        saved_s = time.perf_counter() - started
        # replaced whole, so index_stats on the serving thread never sees it half-updated
        self.cache_state = {
            **self.cache_state,
            "saved_seq": info.seq,
            "saved_documents": info.documents,
            "bytes": info.bytes,
            "save_s": round(saved_s, 3),
        }
        if remap and not self._closing:
            mapped = LexiconIndex()
            try:
                cache.load(self.cache_file, mapped, tokenizer=TOKENIZER_VERSION)
            except cache.CacheInvalid as exc:
                log.warning("the lexicon cache just saved does not load (%s)", exc)
                return
            self._mapped = (mapped, info.epoch, info.seq)
            self.cache_state = {
                **self.cache_state,
                "remap_s": round(time.perf_counter() - started - saved_s, 3),
            }

    def _adopt_mapped(self) -> None:
        """Serve from the cache the saver mapped, once the records since its seq are applied
        to it: the heap arrays of a first index are freed (the mapped pages are the page
        cache's, shared with the next worker and reclaimable)."""
        if self._mapped is None or (self._saver is not None and self._saver.is_alive()):
            return
        mapped, epoch, seq = self._mapped
        self._mapped = None
        follower = self.follower
        if not follower.consistent or follower.epoch != epoch:
            return  # re-snapshotting since that save: it no longer continues
        reached = self.journal.apply(mapped, epoch, seq)
        if reached != follower.seq:
            log.warning(
                "lexicon journal reached seq %d, index at %d: keeping the heap index",
                reached,
                follower.seq,
            )
            return
        self.index = follower.index = mapped
        release_free_memory()
        log.info("lexicon serves the mapped cache of seq %d (journal to %d)", seq, reached)

    # -- sync ----------------------------------------------------------------------------------
    def _call_graph(self, method: str, body: dict[str, Any], timeout_ms: int) -> Any:
        if self._client is None:  # made on the serving thread that uses it
            self._client = Client(self.frontend, timeout_ms=timeout_ms)
        return self._client.call(GRAPH_SERVICE, method, body, timeout_ms=timeout_ms)

    def sync_tick(self) -> None:
        now = time.monotonic()
        follower = self.follower
        if follower.busy or now >= self._next_poll:
            seq = follower.seq
            follower.tick(self.slice_s)
            self._polled_at = now
            moved = follower.busy or follower.seq != seq
            self._idle_poll_s = (
                IDLE_POLL_S if moved else min(2 * self._idle_poll_s, IDLE_POLL_MAX_S)
            )
            self._next_poll = now + self._idle_poll_s
        # the feed moved since the last turn, applied here or by a read-your-writes search
        if follower.busy or follower.seq != self._seen_seq:
            self._moved_at, self._seen_seq = now, follower.seq
        self._adopt_mapped()
        if self._save_due(now):
            if self._polled_at < now:  # still as of a poll up to IDLE_POLL_MAX_S old: look
                self._next_poll = now
            else:
                self.save_cache()

    def close(self) -> None:
        """On stop: the index must be on disk for the next start. When the cache and its
        journal hold it, flushing the journal is enough; else (a first index, a re-snapshot)
        the cache is written here, within the stop timeout (docs/LEXICON.md, "Term cache")."""
        self._closing = True
        if self._saver is not None:
            self._saver.join()
        self._mapped = None
        if self.covered:
            self.journal.flush()
        else:
            self.save_cache(wait=True)
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- methods -------------------------------------------------------------------------------
    def search(self, raw: Any) -> dict[str, Any]:
        body = body_of(raw)
        query = _text(body, "query", QUERY_MAX_CHARS)
        namespace = _text(body, "namespace", NAMESPACE_MAX_CHARS)
        top_n = opt_int(body, "top_n", DEFAULT_TOP_N, 1, MAX_TOP_N)
        min_seq = opt_int_or_none(body, "min_seq", 0, 2**63 - 1)
        wait_ms = opt_int(body, "wait_ms", DEFAULT_WAIT_MS, 0, 60_000)
        caught_up = self.wait_for(min_seq, wait_ms)
        tokens = self.tokenizer.tokenize(query)
        hits = self.index.top(namespace, Counter(tokens), top_n)
        return {
            "hits": [{"id": doc_id, "score": score} for doc_id, score in hits],
            "score_kind": "bm25",
            "tokens": tokens,
            "seq": self.follower.seq,
            "caught_up": caught_up,
        }

    def wait_for(self, min_seq: int | None, wait_ms: int) -> bool:
        """Read-your-writes: apply the feed up to ``min_seq`` first, within ``wait_ms``, the
        serving loop's share of the heartbeat expiry and half the request's remaining time
        (the rest is for answering). Whether the index reflects ``min_seq`` (or, without
        one, is consistent)."""
        if min_seq is None:
            return self.follower.consistent
        if self.follower.reached(min_seq):
            return True
        self._idle_poll_s = IDLE_POLL_S  # writes are arriving: poll soon again
        left_s = remaining_ms(wait_ms) * WAIT_SHARE_OF_DEADLINE / 1000
        return self.follower.catch_up(min_seq, min(wait_ms / 1000, self.max_wait_s, left_s))

    def coverage(self, raw: Any) -> dict[str, Any]:
        """How much of what a query is about each of these documents contains (idf-weighted).

        The inject path's topical-agreement gate: a memory that shares a name with the prompt
        but none of its rarer words is not what the prompt asks about.
        """
        body = body_of(raw)
        query = _text(body, "query", QUERY_MAX_CHARS)
        namespace = _text(body, "namespace", NAMESPACE_MAX_CHARS)
        min_seq = opt_int_or_none(body, "min_seq", 0, 2**63 - 1)
        wait_ms = opt_int(body, "wait_ms", DEFAULT_WAIT_MS, 0, 60_000)
        ids = body.get("ids")
        if (
            not isinstance(ids, list)
            or len(ids) > COVERAGE_MAX_IDS
            or not all(isinstance(i, str) for i in ids)
        ):
            raise BadRequest(f"'ids' must be a list of at most {COVERAGE_MAX_IDS} strings")
        caught_up = self.wait_for(min_seq, wait_ms)
        terms = self.tokenizer.tokenize(query, content_only=True)
        shares = self.index.coverage(namespace, Counter(terms), ids)
        return {"coverage": shares, "terms": terms, "caught_up": caught_up}

    def extract_keys(self, raw: Any) -> dict[str, Any]:
        body = body_of(raw)
        text = _text(body, "text", MAX_TEXT_CHARS)
        limit = opt_int(body, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        content_words = opt_bool(body, "content_words", False)
        found = extract_keys(text, self.tokenizer.analyse(text), limit, content_words)
        return {"keys": [c.to_wire() for c in found]}

    def index_stats(self, raw: Any) -> dict[str, Any]:
        body_of(raw)
        spaces = {
            name: {
                "documents": space.n_docs,
                "terms": space.vocabulary_size(),
                "slots": space.slot_count,
                "avg_doc_len": round(space.total_len / space.n_docs, 3) if space.n_docs else 0.0,
            }
            for name, space in sorted(self.index.namespaces.items())
        }
        return {
            "documents": len(self.index),
            "namespaces": spaces,
            "tokenizer": TOKENIZER_VERSION,
            "kiwi": {
                "load_s": round(self.tokenizer.load_s, 3),
                "warm_s": round(self.tokenizer.warm_s, 3),
            },
            "sync": self.follower.describe(),
            "cache": dict(self.cache_state),
        }


def make_service(lexicon: Lexicon) -> Service:
    service = Service(SERVICE_NAME)
    service.add("search", lexicon.search, idempotent=True)
    service.add("coverage", lexicon.coverage, idempotent=True)
    service.add("extract_keys", lexicon.extract_keys, idempotent=True)
    service.add("index_stats", lexicon.index_stats, idempotent=True)
    service.every(SYNC_INTERVAL_S, lexicon.sync_tick)
    service.on_stop.append(lexicon.close)
    return service


def preload(settings: Settings) -> Callable[[], Service]:
    """Kiwi, loaded and warmed once; what it returns builds the service around it (in a worker
    forked from this process, services/prefork.py, each one loads the index afresh)."""
    tokenizer = shared_tokenizer()
    return lambda: make_service(Lexicon(settings, tokenizer))


def build(settings: Settings) -> Service:
    return preload(settings)()
