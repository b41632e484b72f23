"""The graph service: sole owner of the DuckDB file and of the key/memory graph in memory.

Reads are answered from memory. Each write mutates the in-memory graph, records what it
touched, appends those rows and its feed events to the graph's write-ahead log (one
``fdatasync``: store/writelog.py), and only then replies (with ``seq``, the feed head, so the
router can ask the lexicon to catch up to it); the logged writes reach DuckDB together, one
transaction every ``WRITE_BEHIND_INTERVAL_S``. If the append fails, the in-memory graph is
rebuilt from the file and the log, so memory never runs ahead of disk. It stays one worker
(invariant 1: one writer).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from threadpoolctl import threadpool_limits

from keymem.protocol.errors import (
    BadRequest,
    InternalError,
    KeymemError,
    KeysUnheld,
    NotFound,
    Unavailable,
    outcome_to_wire,
)
from keymem.protocol.fields import batch_items, body_of
from keymem.protocol.worker import Service
from keymem.services import config as cfg
from keymem.services import journal
from keymem.services.catalog import GRAPH_BACKUP_WAIT_AT_STOP_S
from keymem.services.config import Settings
from keymem.services.graph import (
    embedding,
    feed,
    feedback,
    hybrid,
    idempotency,
    journaling,
    keyann,
    matching,
    navigate,
    overview,
    rows,
    session_brief,
    sleep,
    views,
    writes,
)
from keymem.services.graph.feedback import RecallBuffer
from keymem.services.graph.profile import KeyProfile, Thresholds, key_profile_of
from keymem.services.graph.requests import (
    embedded_of,
    namespace_of,
    req_str,
    source_of,
    vector_width,
)
from keymem.services.graph.state import GraphState
from keymem.services.journal import Journal
from keymem.store.backup import BACKUPS_KEPT, BackupJob, backup_dir, start_backup
from keymem.store.changes import Changes
from keymem.store.database import GraphStore, StoreLocked, disk_full, graph_path, trim_heap

log = logging.getLogger("keymem.graph")

# A write request validated against the current state, ready to apply at commit time ``now``.
Action = Callable[[float], dict[str, Any]]
# Validates one request body (raising a typed error) and returns its action.
Prepare = Callable[[Any], Action]

# Methods that change the file: acknowledged after commit, never retried by the router.
# match_keys is listed here because a literal hit on a learned alias counts the hit; it is
# still safe to repeat, so it is registered as idempotent below.
WRITE_METHODS = (
    "remember",
    "remember_each",
    "remember_batch",
    "correct",
    "forget",
    "read_memory",
    "confirm_memory",
    "dismiss",
    "reinforce_path",
    "reembed_begin",
    "reembed_put",
    "reembed_commit",
    "backup",
    "drop_namespace",
    "sleep",
    "put_memory_vectors",
)
# Writes whose concurrent requests share one transaction (group commit): the worker hands
# everything already queued for one of these methods to a single handler call.
GROUP_COMMITTED = (
    "remember",
    "remember_each",
    "remember_batch",
    "correct",
    "forget",
    "read_memory",
    "confirm_memory",
    "dismiss",
)
GROUP_MAX_REQUESTS = 64
GROUP_MAX_BYTES = 8 * 1024 * 1024
# Requests the router may keep outstanding on the graph worker, so writes can pile up into
# groups while a commit runs (reads are answered one by one either way).
GRAPH_CAPACITY = 16
READ_METHODS = (
    "match_keys",
    "recall_candidates",
    "navigate",
    "brief",
    "read_key",
    "browse_keys",
    "history",
    "get_memories",
    "counts",
    "overview",
    "memory_keys",
    "feed_head",
    "feed_snapshot",
    "feed_since",
    "fingerprint",
    "held_vectors",
    "reembed_keys",
    "backup_status",
    "quarantine",
    "list_memories",
    "sleep_status",
    "vector_backlog",
)

TTL_SWEEP_INTERVAL_S = 10.0
# Logged writes are folded into DuckDB, all in one transaction (its statements cost the same
# for one write as for a hundred), once no write came for this long (checked as often), at the
# latest with each checkpoint check (every second), and at once when the log holds this much.
WRITE_BEHIND_INTERVAL_S = 0.2
WRITE_BEHIND_MAX_BYTES = 4 * 1024 * 1024
BLAS_THREADS = 1
CHECKPOINT_CHECK_INTERVAL_S = 1.0
KEY_ANN_CHECK_INTERVAL_S = 1.0  # a namespace grown past the threshold, a finished build
IDLE_CHECKPOINT_AFTER_S = 5.0
# A restart replays DuckDB's write-ahead log written since the last checkpoint, at about this
# much CPU per transaction and per byte (the write-behind's folds, 10k store, load ~30: 300
# folds of one remember, 452 kB, 0.42 s; 30 folds of a batch of 100, 1.74 MB, 0.11 s), while a
# checkpoint's cost grows with the store and hardly with the log (10k: ~10-30 ms, 1M: ~40-80 ms
# at load 2-17, most of it the memories' primary-key index written again). Steady writes never
# leave the graph idle, so the log is also checkpointed once replaying it would cost what the
# last checkpoint cost, and never below WAL_REPLAY_MIN_S: at most ~0.35 s of replay added to a
# restart. Counted in bytes alone (0.35 us a byte, a 1 MiB floor) a log of batch folds was
# checkpointed every ~1,500 batched memories: ~0.03-0.04 ms of CPU a memory at 1M.
WAL_REPLAY_S_PER_COMMIT = 1.4e-3
WAL_REPLAY_S_PER_BYTE = 0.04e-6
WAL_REPLAY_MIN_S = 0.35
MAINTENANCE_INTERVAL_S = 3_600.0
SLEEP_CHECK_INTERVAL_S = 60.0  # how often the schedule is looked at
SECONDS_PER_HOUR = 3_600.0
# Modules imported on first use rather than at import: by duckdb's first fetchnumpy (the load)
# and by the worker's first heartbeat. A prefork parent imports them before it forks.
FIRST_USE_MODULES = ("numpy.ma", "psutil")
# How long a starting graph waits for the file's lock (a worker that lost its parent closes
# it within a second or so), and how often it tries.
LOCK_WAIT_S = 15.0
LOCK_RETRY_S = 0.05
# How often the serving loop collects cyclic garbage and freezes what survived (GcBetweenRequests).
GC_INTERVAL_S = 1.0


class GcBetweenRequests:
    """The graph worker's cyclic garbage collection: between requests, never inside one.

    The loaded graph is frozen (``_load_state``), but what outlives a request afterwards (the
    per-key link rankings a search caches, the key indexes a background build hands over, the
    links written since the load) stayed in the collector's oldest generation, and every
    automatic full collection walked all of it again: at 1M memories 45-51 ms, inside whichever
    search allocated past the threshold (docs/GRAPH.md "Garbage collection"). The search path
    makes almost no cyclic garbage (refcounting frees it), so automatic collection is off while
    the worker serves; a timer of the serving loop runs between requests, collects what the
    requests since the last tick left in cycles, and freezes the survivors: long-lived by then,
    and never walked again. A tick walks only the objects made since the last one (milliseconds),
    and cyclic garbage waits at most ``GC_INTERVAL_S`` (or the one request being served).
    """

    def __init__(self) -> None:
        self.was_enabled = False

    def start(self) -> None:
        self.was_enabled = gc.isenabled()
        gc.disable()

    def tick(self) -> None:
        gc.collect()
        gc.freeze()

    def stop(self) -> None:
        """Automatic collection as it was (a process that runs other services in threads)."""
        if self.was_enabled:
            gc.enable()


class GraphService:
    def __init__(
        self,
        path: Path,
        key_profile: KeyProfile | None = None,
        sleep_interval_h: float = 0.0,
        key_ann_min_keys: int = cfg.KEY_ANN_MIN_KEYS.default,
    ) -> None:
        self.home = path.parent
        # large namespaces' approximate key indexes, saved next to the graph file
        self.key_ann = keyann.KeyAnn(self.home / keyann.DIRECTORY, key_ann_min_keys)
        self.sleep_interval_h = sleep_interval_h  # 0: no scheduled sleep passes
        self.started_at = time.time()
        self.sleep_pass: sleep.SleepPass | None = None
        self.key_profile = key_profile or KeyProfile()
        self.buffer = RecallBuffer()
        # recall's scoring; the recall ablation swaps it in process (never on the wire)
        self.scoring = hybrid.Scoring()
        self.staging: embedding.Staging | None = None
        self.backup_job: BackupJob | None = None
        self.reembed_backup: BackupJob | None = None
        self.last_write = 0.0
        self.dirty_since_checkpoint = False
        self.replay_budget_s = WAL_REPLAY_MIN_S  # the last checkpoint's cost, at least that
        self.quarantined: list[rows.Quarantined] = []
        self.journal = Journal(self.home, "graph")
        self.store = GraphStore(path)
        # a start that fails from here on (a damaged row, no memory for the load) lets go of
        # the file and its log, for the next opener in this process (benchmarks, tests)
        with contextlib.ExitStack() as undo:
            undo.callback(self.store.close)
            self.ledger = idempotency.Ledger(self.store)
            started = time.perf_counter()
            self.state = self._load_state()
            self.load_seconds = time.perf_counter() - started
            log.info(
                "graph loaded %d keys, %d memories in %.2f s",
                len(self.state.keys),
                len(self.state.memories),
                self.load_seconds,
            )
            self.key_ann_tick()  # a large namespace's index starts loading in the background
            try:
                self.sweep()
            except Unavailable:
                log.warning("expired memories stay until the disk has room to delete them")
            undo.pop_all()

    # -- the unit of work ------------------------------------------------------------------
    def write_group(
        self,
        prepare: Prepare,
        bodies: list[Any],
        method: str | None = None,
        journal_as: str | None = None,
    ) -> list[Any]:
        """Apply several write requests and commit them in ONE transaction (group commit).

        ``prepare`` validates one body against the current state (raising a typed error before
        anything changes) and returns the action that applies it. A request that fails
        validation gets its own error; the others are still committed. Results carry ``seq``,
        the feed head after the commit. With ``method`` named, a body's ``idempotency_key``
        makes the write happen once: a repeat gets the first commit's result (idempotency.py).
        Committed results are recorded in the journal as ``journal_as`` (default ``method``).
        """
        state = self.state
        state.changes = Changes()
        now = time.time()
        results: list[Any] = []
        replayed: set[int] = set()  # positions answered with an earlier commit's result
        staged: dict[str, dict[str, Any]] = {}  # keyed results of this group, by key
        for body in bodies:
            before = state.changes.mutations
            try:
                key = idempotency.key_of(body) if method else None
                if key is None:
                    results.append(prepare(body)(now))
                    continue
                assert method is not None
                done = staged.get(key) or self.ledger.replay(method, key)
                if done is not None:
                    replayed.add(len(results))
                else:
                    done = prepare(body)(now)
                    self.ledger.stage(state.changes, method, key, done, now)
                    staged[key] = done
                results.append(done)
            except KeymemError as exc:
                if state.changes.mutations != before:  # must not happen: validate first
                    log.error("a write failed after changing the graph; reloading")
                    self.reload()
                    raise InternalError(f"write failed part-way: {exc}") from exc
                results.append(exc)
            except BaseException:
                if not state.changes.empty():
                    log.warning("a write failed part-way; reloading the graph from the file")
                    self.reload()
                raise
        changes, state.changes = state.changes, Changes()
        if not changes.empty():
            try:
                state.head_seq = self.store.append(changes, state.head_seq)
            except Exception as exc:
                log.exception("commit failed; reloading the graph from the file")
                self.reload()
                if not disk_full(exc):
                    raise InternalError(f"commit failed: {type(exc).__name__}: {exc}") from exc
                if not changes.bookkeeping_only():
                    raise Unavailable(
                        f"disk full: this write was not saved (nothing changed). Free space on "
                        f"the disk that holds {self.home}, then retry; reads keep working."
                    ) from exc
                # Reads answer on a full disk; what they would have taught is not kept.
                return self._stamp_seq(results)
            self.ledger.committed(changes)
            self.last_write = time.monotonic()
            self.dirty_since_checkpoint = True
            if self.store.pending_bytes() >= WRITE_BEHIND_MAX_BYTES:
                self.flush_due()
        journal_as = journal_as or method
        if journal_as is not None:
            journaling.record_results(self.journal, state, journal_as, results, replayed)
        return self._stamp_seq(results)

    def _stamp_seq(self, results: list[Any]) -> list[Any]:
        for result in results:
            if isinstance(result, dict):
                result["seq"] = self.state.head_seq
        return results

    def group_handler(self, prepare: Prepare, method: str) -> Callable[[list[Any]], list[Any]]:
        def handle(bodies: list[Any]) -> list[Any]:
            return self.write_group(prepare, bodies, method)

        return handle

    def remember_each(self, bodies: list[Any]) -> list[Any]:
        """Requests that each carry several remembers (``items``), every item answered on its
        own as a lone ``remember`` would be (its result or its typed error, its idempotency
        key in the same ledger), all of them committed in one transaction: the writes of
        concurrent callers that a front end sent together (services/mcp/coalesce.py)."""
        spans: list[tuple[int, int] | KeymemError] = []
        items: list[Any] = []
        for raw in bodies:
            try:
                given = batch_items(body_of(raw))
            except KeymemError as exc:
                spans.append(exc)
                continue
            spans.append((len(items), len(given)))
            items.extend(given)
        outcomes = self.write_group(self.prepare_remember, items, "remember") if items else []
        return [
            span
            if isinstance(span, KeymemError)
            else {"results": [outcome_to_wire(o) for o in outcomes[span[0] : sum(span)]]}
            for span in spans
        ]

    def write(self, prepare: Prepare, body: Any, journal_as: str | None = None) -> dict[str, Any]:
        (result,) = self.write_group(prepare, [body], journal_as=journal_as)
        if isinstance(result, KeymemError):
            raise result
        assert isinstance(result, dict)
        return result

    def reload(self) -> None:
        self.state = self._load_state()

    def _load_state(self) -> GraphState:
        """Rebuild the in-memory graph from the file.

        Hundreds of thousands of small objects are created at once: the cyclic GC would run
        over the growing heap again and again (measured: most of the load time at 100k
        memories), so it is paused, and the loaded objects are then frozen out of future
        collections, which also keeps GC pauses out of request latencies.
        """
        enabled = gc.isenabled()  # off while GcBetweenRequests serves
        gc.disable()
        try:
            loaded = self.store.load()
            self.quarantined = rows.quarantine(loaded)
            for row in self.quarantined:
                log.warning("quarantined %s row %s: %s", row.table, row.row, row.reason)
            if self.quarantined:
                log.warning(
                    "%d damaged rows quarantined (left out of the graph; `keymem doctor` "
                    "lists them); the rest of the graph serves",
                    len(self.quarantined),
                )
            state = GraphState(loaded, self.key_profile.hub_min_links)
            # the fetched columns go, and their freed pages back to the system (100k: 54 MB)
            del loaded
            trim_heap()
            return state
        finally:
            if enabled:
                gc.enable()
            gc.freeze()

    # -- periodic work ---------------------------------------------------------------------
    def sweep(self) -> None:
        if self.state.ttl_heap and self.state.ttl_heap[0][0] <= time.time():
            swept = self.write(
                lambda _: lambda now: {"expired": writes.sweep_expired(self.state, now)}, None
            )
            if swept["expired"]:
                self.journal.record("sweep", expired=swept["expired"])

    def flush_due(self) -> None:
        """Fold the logged writes into DuckDB. On failure they stay logged, acknowledged and
        durable, for the next try: a write already answered must not be reported failed."""
        try:
            self.store.flush()
        except Exception as exc:
            if disk_full(exc):
                log.warning("logged writes wait for disk space to reach the file: %s", exc)
            else:
                log.exception("logged writes could not reach the file; they stay logged")

    def fold_due(self) -> None:
        """The write-behind timer: fold once the writes pause, so the batches of a burst (one
        client's arrive ~0.1 s apart) share a fold instead of paying its transaction one or
        two at a time (at 1M, in process: 0.22 ms of CPU a batched memory with batches 0.12 s
        apart, 0.14 back to back).
        ``checkpoint_due`` folds whatever waits each second."""
        if time.monotonic() - self.last_write >= WRITE_BEHIND_INTERVAL_S:
            self.flush_due()

    def replay_s(self) -> float:
        """What replaying DuckDB's write-ahead log would cost a restart now (an estimate)."""
        return (
            self.store.commits_since_checkpoint * WAL_REPLAY_S_PER_COMMIT
            + self.store.wal_bytes() * WAL_REPLAY_S_PER_BYTE
        )

    def checkpoint_due(self) -> None:
        """Checkpoint once idle after writes, or, busy or not, once replaying the write-ahead
        log would cost what the last checkpoint did (``replay_budget_s``)."""
        if any(job is not None and job.status == "running" for job in self.backups()):
            return  # a checkpoint would wait for (or fail beside) the backup's transaction
        self.flush_due()
        if self.store.pending:
            return  # no room on the disk for the logged writes, nor for a checkpoint
        idle = time.monotonic() - self.last_write >= IDLE_CHECKPOINT_AFTER_S
        if (self.dirty_since_checkpoint and idle) or self.replay_s() >= self.replay_budget_s:
            started = time.process_time()
            self.store.fold_link_weights()
            self.store.checkpoint()
            self.dirty_since_checkpoint = False
            self.replay_budget_s = max(WAL_REPLAY_MIN_S, time.process_time() - started)

    def maintenance(self) -> None:
        pruned = self.write(
            lambda _: lambda now: {"pruned": feedback.prune_learned_aliases(self.state, now)},
            None,
        )
        if pruned["pruned"]:
            self.journal.record("alias_prune", pruned=pruned["pruned"])
        self.state.first_seq = self.store.prune_events(feed.RETAINED_EVENTS, self.state.head_seq)
        self.ledger.prune(time.time())
        journal.prune(self.home, time.time())

    # -- sleep (services/graph/sleep.py) ---------------------------------------------------
    def sleep(self, raw: Any) -> dict[str, Any]:
        """Start a sleep pass (or report the one running); poll sleep_status."""
        body = body_of(raw)
        dry_run = body.get("dry_run", False)
        if not isinstance(dry_run, bool):
            raise BadRequest("dry_run must be true or false")
        running = self.sleep_pass
        if running is None or running.done:
            self.start_sleep(dry_run)
        assert self.sleep_pass is not None
        return self.sleep_pass.report.to_wire()

    def sleep_status(self, raw: Any) -> dict[str, Any]:
        if self.sleep_pass is None:
            return {"status": "none"}
        return self.sleep_pass.report.to_wire()

    def start_sleep(self, dry_run: bool, now: float | None = None) -> None:
        """Begin a pass (its backup first); ``now`` is the pass's clock, which decay reads."""
        backup = None
        if not dry_run:
            self.backup_job = backup = start_backup(
                self.store, backup_dir(self.home), tag="pre-sleep"
            )
        self.sleep_pass = sleep.SleepPass(
            self.state,
            self.thresholds(),
            dry_run=dry_run,
            backup=backup,
            now=time.time() if now is None else now,
        )

    def sleep_due(self) -> None:
        """Start the scheduled pass when ``KEYMEM_SLEEP_INTERVAL_H`` has passed since the last
        (or, before any, since this service started)."""
        if self.sleep_interval_h <= 0 or (self.sleep_pass and not self.sleep_pass.done):
            return
        since = self.state.slept_at or self.started_at
        if time.time() - since >= self.sleep_interval_h * SECONDS_PER_HOUR:
            self.start_sleep(dry_run=False)

    def sleep_tick(self) -> None:
        """One slice of the running pass, between requests; its batches commit as writes."""
        running = self.sleep_pass
        if running is None or running.done:
            return
        if running.state is not self.state:
            running.fail("the graph was reloaded from the file during the pass; run it again")
        else:
            running.advance(lambda batch: self.write(lambda _: batch, None))
        if running.done and running.report.status == "done":
            self.journal.record("sleep", **running.report.counts())
        elif running.done:
            log.warning("sleep pass failed: %s", running.report.error)

    def key_ann_tick(self) -> None:
        self.key_ann.tick(self.state.indexes, self.state.fingerprint)
        self.state.halve_matrices()  # a namespace whose index serves ranks from half precision

    def settle_keys(self) -> bool:
        """Insert one namespace's next few unsettled keys into its approximate index while no
        request waits (``KeyIndex.settle``): a write that coins a key does not wait for its
        insert. True while keys wait."""
        for index in self.state.indexes.values():
            if index.unsettled:
                index.settle()
                return True
        return False

    def close(self) -> None:
        self.finish_backups()
        self.journal.flush()
        self.store.close()

    def thresholds(self, claimed: str | None = None) -> Thresholds:
        """Key thresholds for the graph's vectors, or for the first write's (``claimed``)."""
        return self.key_profile.thresholds(self.state.fingerprint or claimed)

    # -- writes ----------------------------------------------------------------------------
    def _claim_space(self, body: dict[str, Any], dim: int | None) -> None:
        claimed = embedding.check_write_fingerprint(self.state, body)
        if self.state.dim is None and dim is not None:
            self.state.dim = dim
            self.state.changes.set_meta("dim", dim)
        if claimed is not None and self.state.fingerprint is None:
            self.state.fingerprint = claimed
            self.state.changes.set_meta("fingerprint", claimed)

    def prepare_remember(self, raw: Any) -> Action:
        body = body_of(raw)
        claimed = embedding.check_write_fingerprint(self.state, body)
        by_text = embedded_of(body, self.state.dim)
        dim = self.state.dim or vector_width(by_text.values())
        item = writes.parse_remember(body, dim, by_text=by_text)
        writes.check_related(self.state, item.related_to, item.namespace)
        self._filed_by_text([item])
        thresholds = self.thresholds(claimed)

        def action(now: float) -> dict[str, Any]:
            self._claim_space(body, vector_width(key.vector for key in item.keys))
            return writes.remember(self.state, item, thresholds, now)

        return action

    def _filed_by_text(self, items: list[writes.RememberItem]) -> None:
        """A key a write sends no vector for (neither in ``key_vectors`` nor in
        ``embedded_keys``) is filed by its text: each one its namespace holds under exactly
        that text resolves by it, so no vector is sent, fetched or checked, and a write under
        known keys is one graph round trip with no lookup first. When some is not held,
        nothing is written: the refusal (``KeysUnheld``) comes after every other check of the
        write passed and names those texts (``unheld_keys``), for the caller to embed exactly
        them and send the write again with their vectors (``embedded_keys``,
        ``embedded_vectors``)."""
        missing = embedding.unheld(self.state, [(item.namespace, item.keys) for item in items])
        if missing:
            raise KeysUnheld(
                "key vectors are needed for keys this graph does not hold",
                {"unheld_keys": missing},
            )

    def prepare_remember_batch(self, raw: Any) -> Action:
        body = body_of(raw)
        claimed = embedding.check_write_fingerprint(self.state, body)
        items_raw = batch_items(body)
        by_text = embedded_of(body, self.state.dim)  # one table for every item
        dim = self.state.dim or vector_width(by_text.values())
        items = []
        for position, item_raw in enumerate(items_raw):
            try:
                item = writes.parse_remember(item_raw, dim, by_text=by_text)
            except KeymemError as exc:
                exc.detail = {**exc.detail, "item": position}
                exc.message = f"item {position}: {exc.message}"
                raise
            dim = dim or vector_width(key.vector for key in item.keys)
            writes.check_related(self.state, item.related_to, item.namespace)
            items.append(item)
        self._filed_by_text(items)
        thresholds = self.thresholds(claimed)
        shared_source = source_of(body)

        def action(now: float) -> dict[str, Any]:
            self._claim_space(body, dim)
            batch_id = self.state.new_id()
            results = []
            with writes.keys_looked_up(self.state, items):
                for item in items:
                    source = {**(shared_source or {}), **(item.source or {}), "batch_id": batch_id}
                    results.append(
                        writes.remember(self.state, replace(item, source=source), thresholds, now)
                    )
            return {"results": results, "batch_id": batch_id}

        return action

    def prepare_correct(self, raw: Any) -> Action:
        body = body_of(raw)
        claimed = embedding.check_write_fingerprint(self.state, body)
        thresholds = self.thresholds(claimed)
        plan = writes.plan_correct(self.state, body, time.time())
        return lambda now: writes.correct(self.state, plan, thresholds, now)

    def prepare_forget(self, raw: Any) -> Action:
        body = body_of(raw)
        memory_id = req_str(body, "memory_id")
        memory = self.state.memories.get(memory_id)
        if memory is None or memory.namespace != namespace_of(body):
            raise NotFound(f"memory {memory_id} not found")
        return lambda now: {"deleted": writes.forget(self.state, memory, now)}

    def prepare_read_memory(self, raw: Any) -> Action:
        floor = self.thresholds().alias_floor
        return lambda now: feedback.read_memory(self.state, self.buffer, raw, floor, now)

    def prepare_confirm_memory(self, raw: Any) -> Action:
        return lambda now: feedback.confirm_memory(self.state, raw, now)

    def prepare_dismiss(self, raw: Any) -> Action:
        return lambda now: feedback.dismiss(self.state, self.buffer, raw, now)

    def prepare_match_keys(self, raw: Any) -> Action:
        # Learned-alias hits are soft state: they ride along with this call's commit.
        thresholds = self.thresholds()
        return lambda now: matching.match_keys(self.state, self.buffer, thresholds, raw, now)

    def brief(self, raw: Any) -> dict[str, Any]:
        """A namespace's most durable facts for a session start (graph/session_brief.py)."""
        return session_brief.brief(self.state, raw, time.time())

    def reinforce_path(self, raw: Any) -> dict[str, Any]:
        """Hebbian learning from a surfaced-then-read memory (services/graph/feedback.py)."""
        return self.write(
            lambda body: feedback.prepare_reinforce_path(self.state, body, time.time()),
            raw,
            journal_as="reinforce_path",
        )

    def recall_candidates(self, raw: Any) -> dict[str, Any]:
        """Hybrid recall's graph half (services/graph/hybrid.py); a write only if it learns."""
        return self.write(
            lambda body: (
                lambda now: hybrid.recall_candidates(
                    self.state, self.buffer, self.thresholds(), body, now, self.scoring
                )
            ),
            raw,
        )

    def remember(self, raw: Any) -> dict[str, Any]:
        return self.write(self.prepare_remember, raw, journal_as="remember")

    def drop_namespace(self, raw: Any) -> dict[str, Any]:
        """Delete one named namespace whole (``keymem namespaces drop``); it must be named:
        an omitted namespace is ``default`` everywhere else, too easy to drop by mistake."""
        body = body_of(raw)
        named = body.get("namespace")
        if not isinstance(named, str) or not named.strip():
            raise BadRequest("drop_namespace needs the namespace named")
        namespace = namespace_of(body)
        return self.write(
            lambda _: lambda now: writes.drop_namespace(self.state, namespace, now), body
        )

    def remember_batch(self, raw: Any) -> dict[str, Any]:
        return self.write(self.prepare_remember_batch, raw, journal_as="remember_batch")

    def correct(self, raw: Any) -> dict[str, Any]:
        return self.write(self.prepare_correct, raw, journal_as="correct")

    def forget(self, raw: Any) -> dict[str, Any]:
        return self.write(self.prepare_forget, raw, journal_as="forget")

    def read_memory(self, raw: Any) -> dict[str, Any]:
        return self.write(self.prepare_read_memory, raw, journal_as="read_memory")

    def confirm_memory(self, raw: Any) -> dict[str, Any]:
        return self.write(self.prepare_confirm_memory, raw, journal_as="confirm_memory")

    def dismiss(self, raw: Any) -> dict[str, Any]:
        return self.write(self.prepare_dismiss, raw, journal_as="dismiss")

    def match_keys(self, raw: Any) -> dict[str, Any]:
        return self.write(self.prepare_match_keys, raw)

    def navigate(self, raw: Any) -> dict[str, Any]:
        """Key navigation's graph half (services/graph/navigate.py); a write only if it learns."""
        return self.write(
            lambda body: (
                lambda now: navigate.navigate(self.state, self.buffer, self.thresholds(), body, now)
            ),
            raw,
        )

    # -- memory vectors (the dense leg: graph/embedding.py) -------------------------------
    def vector_backlog(self, raw: Any) -> dict[str, Any]:
        return embedding.vector_backlog(self.state, raw)

    def put_memory_vectors(self, raw: Any) -> dict[str, Any]:
        return self.write(lambda body: embedding.prepare_put_memory_vectors(self.state, body), raw)

    # -- embedding migration ---------------------------------------------------------------
    def reembed_begin(self, raw: Any) -> dict[str, Any]:
        """Stage a migration and start its backup now, in the background: by the time every
        key is re-embedded (minutes for a large store) the copy is done, and the commit only
        swaps vectors, so no handler call outlasts the router's liveness window."""
        self.staging = embedding.begin(raw)
        self.reembed_backup = start_backup(self.store, backup_dir(self.home), tag="pre-reembed")
        return {"token": self.staging.token, "total": len(self.state.keys)}

    def reembed_put(self, raw: Any) -> dict[str, Any]:
        return embedding.put(self.staging, self.state, raw)

    def reembed_commit(self, raw: Any) -> dict[str, Any]:
        staging = embedding.ready_to_commit(self.staging, self.state, raw)
        backup = self.reembed_backup
        if backup is None or backup.thread is None:
            raise InternalError("re-embedding has no backup; call reembed_begin again")
        backup.thread.join()  # normally finished long ago
        if backup.status != "done":
            raise InternalError(f"the pre-migration backup failed: {backup.error}")
        self.store.replace_vectors(
            staging.vectors.items(), {"fingerprint": staging.fingerprint, "dim": str(staging.dim)}
        )
        embedding.apply(self.state, staging)
        self.staging = None
        self.reembed_backup = None
        return {
            "replaced": len(staging.vectors),
            "fingerprint": staging.fingerprint,
            "dim": staging.dim,
            "backup": str(backup.path),
            "seq": self.state.head_seq,
        }

    # -- reads (answered from memory) ------------------------------------------------------
    def read_key(self, raw: Any) -> dict[str, Any]:
        return views.read_key(self.state, raw, time.time())

    def browse_keys(self, raw: Any) -> dict[str, Any]:
        return views.browse_keys(self.state, raw)

    def history(self, raw: Any) -> dict[str, Any]:
        return views.history(self.state, raw, time.time())

    def get_memories(self, raw: Any) -> dict[str, Any]:
        return views.get_memories(self.state, raw, time.time())

    def counts(self, raw: Any) -> dict[str, Any]:
        return views.counts(self.state, raw, time.time())

    def list_memories(self, raw: Any) -> dict[str, Any]:
        return views.list_memories(self.state, raw, time.time())

    def overview(self, raw: Any) -> dict[str, Any]:
        """Growth, validity and hubs of the store, for ``keymem report`` (graph/overview.py)."""
        return overview.overview(self.state, raw, time.time())

    def memory_keys(self, raw: Any) -> dict[str, Any]:
        return matching.memory_keys(self.state, raw, time.time())

    def feed_head(self, raw: Any) -> dict[str, Any]:
        return feed.head(self.state)

    def feed_snapshot(self, raw: Any) -> dict[str, Any]:
        return feed.snapshot(self.state, raw, time.time())

    def feed_since(self, raw: Any) -> dict[str, Any]:
        return feed.since(self.state, self.store, raw, time.time())

    def fingerprint(self, raw: Any) -> dict[str, Any] | None:
        return embedding.recorded(self.state)

    def held_vectors(self, raw: Any) -> dict[str, Any]:
        return embedding.held_vectors(self.state, raw)

    def reembed_keys(self, raw: Any) -> dict[str, Any]:
        return embedding.keys_page(self.state, raw)

    def backup(self, raw: Any) -> dict[str, Any]:
        """Start a backup in the background (or report the one running); poll backup_status."""
        body = body_of(raw)
        keep = body.get("keep", None)
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise BadRequest("keep must be a positive integer")
        if self.backup_job is None or self.backup_job.status != "running":
            self.backup_job = start_backup(
                self.store, backup_dir(self.home), keep=keep or BACKUPS_KEPT
            )
        return self.backup_job.to_wire()

    def quarantine(self, raw: Any) -> dict[str, Any]:
        """The damaged rows start-up left out of the graph, and why (services/graph/rows.py)."""
        return rows.listed(self.quarantined)

    def backup_status(self, raw: Any) -> dict[str, Any]:
        if self.backup_job is None:
            return {"status": "none", "path": None, "error": None}
        return self.backup_job.to_wire()

    def backups(self) -> tuple[BackupJob | None, ...]:
        return (self.backup_job, self.reembed_backup)

    def wait_for_backup(self, timeout_s: float = GRAPH_BACKUP_WAIT_AT_STOP_S) -> None:
        give_up = time.monotonic() + timeout_s
        for job in self.backups():
            if job is not None and job.thread is not None:
                job.thread.join(max(0.0, give_up - time.monotonic()))

    def finish_backups(self, timeout_s: float = GRAPH_BACKUP_WAIT_AT_STOP_S) -> None:
        """At stop: a running backup gets ``timeout_s`` to finish and is then abandoned, its
        partial file removed, so the stop ends before supervisord's SIGKILL
        (services/catalog.py, STOP_WAIT_S) and never closes the file under a running copy."""
        self.wait_for_backup(timeout_s)
        for job in self.backups():
            if job is not None and job.status == "running":
                log.warning("stopping: abandoning the backup to %s", job.path)
                job.cancel()


def build(settings: Settings) -> Service:
    return preload(settings)()


def preload(settings: Settings) -> Callable[[], Service]:
    """Everything a graph worker needs but its file, and what opens the file in the worker.

    A supervised graph is a parent that has imported duckdb, numpy and these modules (most of
    a cold start) and forks the worker that serves (services/prefork.py). The parent never
    opens the file, so the worker it forks is the only process that holds the file's lock.
    """
    # The graph's numpy work is matrix-vector products over at most ~100k rows: one BLAS
    # thread does it in a few ms, while a BLAS pool spinning on a shared 2-core box stalls
    # the serving loop (a 36 ms p99 of match_keys with the pool: docs/history/). A forked
    # worker inherits the limit.
    threadpool_limits(limits=BLAS_THREADS)
    for module in FIRST_USE_MODULES:
        importlib.import_module(module)
    path = graph_path(settings.home)
    key_profile = key_profile_of(settings.config)
    sleep_interval_h = settings.config[cfg.SLEEP_INTERVAL_H]
    key_ann_min_keys = settings.config[cfg.KEY_ANN_MIN_KEYS]
    return lambda: make_service(
        _open_when_free(path, key_profile, sleep_interval_h, key_ann_min_keys)
    )


def _open_when_free(
    path: Path, key_profile: KeyProfile, sleep_interval_h: float, key_ann_min_keys: int
) -> GraphService:
    """The graph on ``path``, waiting up to ``LOCK_WAIT_S`` for another process to let go of
    the file: a worker whose parent was killed stops once it notices and closes the file
    while the restarted parent's new worker is already starting."""
    give_up = time.monotonic() + LOCK_WAIT_S
    waiting = False
    while True:
        try:
            return GraphService(path, key_profile, sleep_interval_h, key_ann_min_keys)
        except StoreLocked:
            if time.monotonic() >= give_up:
                raise
            if not waiting:
                log.warning("%s is held by another process; waiting for it", path)
                waiting = True
            time.sleep(LOCK_RETRY_S)


def make_service(graph: GraphService, *, sweep_interval_s: float = TTL_SWEEP_INTERVAL_S) -> Service:
    service = Service("graph", capacity=GRAPH_CAPACITY)
    for name in WRITE_METHODS:
        if name in GROUP_COMMITTED:
            service.add(
                name,
                graph.remember_each
                if name == "remember_each"
                else graph.group_handler(getattr(graph, f"prepare_{name}"), name),
                batch=True,
                max_batch=GROUP_MAX_REQUESTS,
                max_batch_bytes=GROUP_MAX_BYTES,
            )
        else:
            service.add(name, getattr(graph, name))
    for name in READ_METHODS:
        service.add(name, getattr(graph, name), idempotent=True)
    service.every(sweep_interval_s, graph.sweep)
    service.every(WRITE_BEHIND_INTERVAL_S, graph.fold_due)
    service.every(CHECKPOINT_CHECK_INTERVAL_S, graph.checkpoint_due)
    service.every(KEY_ANN_CHECK_INTERVAL_S, graph.key_ann_tick)
    service.when_idle(graph.settle_keys)
    service.every(MAINTENANCE_INTERVAL_S, graph.maintenance)
    service.every(SLEEP_CHECK_INTERVAL_S, graph.sleep_due)
    service.every(0.0, graph.sleep_tick)  # every loop turn: a slice only while a pass runs
    service.every(journal.FLUSH_INTERVAL_S, graph.journal.flush)
    collector = GcBetweenRequests()
    collector.start()
    service.every(GC_INTERVAL_S, collector.tick)
    service.on_stop.append(graph.close)
    service.on_stop.append(collector.stop)
    return service
