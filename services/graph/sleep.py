"""Sleep: the graph's maintenance pass, consolidation without an LLM.

Run on a schedule (``KEYMEM_SLEEP_INTERVAL_H``) or by ``keymem sleep``, in the graph service's
own serving loop: a pass is a generator that does at most ``SLICE_BUDGET_S`` of work between
requests, and each change it makes is a batch of at most ``BATCH_MAX_CHANGES`` committed as one
short transaction through the service's unit of work (one writer, invariant 1). A write that
arrives mid-pass is served at the next slice boundary; each batch re-checks what it changes
against the graph as it is then.

In order:

1. **Back up** (not in a dry run): a ``pre-sleep`` snapshot through the backup machinery, which
   keeps the newest ``BACKUPS_KEPT``; a failed backup ends the pass before anything changed.
2. **Decay** what learning taught and nothing used since: a link whose memory was not read since
   the last pass moves back towards where hook learning started it (a learned association
   towards the weight floor), halving the learned part every ``HALF_LIFE_DAYS`` unused.
   Dismissed links (below their start) are left alone.
3. **Merge keys** that turned out to be one concept: the same normalised form ("e-mail",
   "email"), or concept keys whose vectors clear the key model's own merge threshold while
   sharing most memories. Sibling guards keep apart what only a number, date, version,
   weekday, month or one-letter label tells apart, and name / proper-noun keys merge only by
   form. The absorbed key's surfaces become aliases of the kept one, its links move over.
4. **Flag** pairs of active memories for the agent, never deleting either: a *contradiction*
   (the same sentence but for a number, date, weekday, month or a "not", and a shared key) or a
   *near duplicate* (word sets at least ``NEAR_DUPLICATE_MIN_JACCARD`` alike). The memory view
   lists them in ``contradicts`` and ``near_duplicates``.
5. Record ``slept_at`` in the file's meta (the next pass's "since"), and the pass's counts in the
   journal.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from keymem.services.graph.feedback import decay_floor, starting_weight
from keymem.services.graph.profile import Thresholds
from keymem.services.graph.siblings import Shape, concept_form, shape_of, siblings, words
from keymem.services.graph.state import GraphState
from keymem.services.graph.text import is_short_concept
from keymem.services.graph.validity import SECONDS_PER_DAY
from keymem.store.backup import BackupJob
from keymem.store.records import KeyAlias, KeyRecord, MemoryRecord

# Learned link weight (above where learning started the link) halves every this many days
# its memory goes unread.
HALF_LIFE_DAYS = 30.0
# A decay smaller than this is not written (it would churn every link on every pass).
DECAY_MIN_STEP = 0.001
SLICE_BUDGET_S = 0.05  # work between two looks at the request queue
BATCH_MAX_CHANGES = 500  # links, merges or flagged pairs per transaction
PLAN_STEP_ITEMS = 2_000  # memories or pairs looked at between two budget checks
# Two concept keys merge by vector only when they share more than this share of the smaller
# key's active memories.
MERGE_MIN_SHARED = 0.5
NEAR_DUPLICATE_MIN_JACCARD = 0.8
FLAG_MIN_WORDS = 4  # shorter texts say too little to call two of them the same
# A word in more of a namespace's memories than this finds no near-duplicate candidates (it is
# a stop word there): bounds the candidate search at the cost of texts made only of such words.
POSTING_MAX = 256
# Memories of one sentence pattern beyond this are a template ("Meeting at N"), not a
# contradiction to raise.
TEMPLATE_GROUP_MAX = 8
REPORT_SAMPLE_MAX = 20  # merges and flags listed by name in a pass's report


def merge_reason(
    state: GraphState, a: KeyRecord, b: KeyRecord, shared: float, thresholds: Thresholds
) -> str | None:
    """Why keys ``a`` and ``b`` of one namespace are one concept ("form" or "vector"), or None.

    ``shared``: the share of the smaller key's active memories the two have in common.
    """
    if siblings(a.concept, b.concept):
        return None
    if a.key_type == b.key_type and concept_form(a.concept) == concept_form(b.concept):
        return "form"
    if a.is_entity or b.is_entity or shared <= MERGE_MIN_SHARED:
        return None
    short = is_short_concept(a.concept) or is_short_concept(b.concept)
    threshold = thresholds.short_key_merge if short else thresholds.key_merge
    cosine = float(np.dot(state.key_vector(a), state.key_vector(b)))
    return "vector" if threshold > 0 and cosine >= threshold else None


@dataclass
class Report:
    """What a pass did (or, in a dry run, would do); its wire form is ``to_wire``."""

    dry_run: bool
    started_at: float
    status: str = "running"
    phase: str = "backup"
    finished_at: float | None = None
    backup: str | None = None
    error: str | None = None
    decayed_links: int = 0
    merged_keys: int = 0
    contradictions: int = 0
    near_duplicates: int = 0
    merges: list[dict[str, Any]] = field(default_factory=list)
    flags: list[dict[str, Any]] = field(default_factory=list)

    def counts(self) -> dict[str, int | bool]:
        return {
            "dry_run": self.dry_run,
            "decayed_links": self.decayed_links,
            "merged_keys": self.merged_keys,
            "contradictions": self.contradictions,
            "near_duplicates": self.near_duplicates,
        }

    def to_wire(self) -> dict[str, Any]:
        seconds = (self.finished_at or time.time()) - self.started_at
        return {
            **self.counts(),
            "status": self.status,
            "phase": self.phase,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "seconds": round(seconds, 3),
            "backup": self.backup,
            "error": self.error,
            "merges": self.merges,
            "flags": self.flags,
        }


# A batch of changes, applied at commit time ``now`` inside the service's unit of work.
Apply = Callable[[float], dict[str, Any]]
# Pause: nothing to do until something outside the pass (the backup) finishes.
PAUSE = "pause"
Step = Apply | str | None


class SleepPass:
    """One pass over the graph; ``advance`` runs it a slice at a time."""

    def __init__(
        self,
        state: GraphState,
        thresholds: Thresholds,
        *,
        dry_run: bool,
        backup: BackupJob | None,
        now: float,
    ) -> None:
        self.state = state
        self.thresholds = thresholds
        self.backup = backup
        self.now = now
        self.since = state.slept_at
        self.report = Report(dry_run=dry_run, started_at=now)
        self.steps = self._run()

    @property
    def done(self) -> bool:
        return self.report.status != "running"

    def advance(self, commit: Callable[[Apply], object], budget_s: float = SLICE_BUDGET_S) -> None:
        """Work for about ``budget_s``; ``commit`` runs a batch in one transaction. An error
        ends the pass (``failed``); what earlier batches committed stays committed."""
        deadline = time.perf_counter() + budget_s
        try:
            while not self.done:  # at least one step per call
                step = next(self.steps, None)
                if step == PAUSE:
                    return
                if callable(step):
                    commit(step)
                if time.perf_counter() >= deadline:
                    return
        except Exception as exc:
            self.fail(f"{type(exc).__name__}: {exc}")

    def fail(self, error: str) -> None:
        self.report.status = "failed"
        self.report.error = error
        self.report.finished_at = time.time()

    # -- the pass ----------------------------------------------------------------------------
    def _run(self) -> Iterator[Step]:
        report = self.report
        if not report.dry_run:
            assert self.backup is not None
            while self.backup.status == "running":
                yield PAUSE
            if self.backup.status != "done":
                self.fail(f"the pre-sleep backup failed: {self.backup.error}")
                return
            report.backup = str(self.backup.path)
        for phase, steps in (
            ("decay", self._decay()),
            ("merge", self._merge_keys()),
            ("flag", self._flag()),
        ):
            report.phase = phase
            yield from steps
        report.phase = "finish"
        if not report.dry_run:
            yield self._finish
        report.status = "done"
        report.finished_at = time.time()

    def _batches(
        self, planned: Iterator[Any], apply_one: Callable[[Any, float], bool]
    ) -> Iterator[Step]:
        """Commit ``apply_one`` over what ``planned`` yields, ``BATCH_MAX_CHANGES`` a batch.

        ``planned`` yields None to hand the loop back between planning steps. In a dry run
        nothing is applied. ``apply_one`` re-checks its item against the graph as it is at
        commit time and returns whether it changed anything.
        """
        pending: list[Any] = []

        def batch(items: list[Any]) -> Apply:
            return lambda now: {"changed": sum(1 for item in items if apply_one(item, now))}

        for item in planned:
            if item is None:
                yield None
                continue
            if self.report.dry_run:
                continue
            pending.append(item)
            if len(pending) >= BATCH_MAX_CHANGES:
                yield batch(pending)
                pending = []
        if pending:
            yield batch(pending)

    def _finish(self, now: float) -> dict[str, Any]:
        self.state.slept_at = now
        self.state.changes.set_meta("slept_at", repr(now))
        return {}

    # -- decay -------------------------------------------------------------------------------
    def _decay(self) -> Iterator[Step]:
        yield from self._batches(self._plan_decay(), self._apply_decay)

    def _decayed_weight(self, memory: MemoryRecord, weight: float, target: float) -> float | None:
        """The weight after decay, or None when it stays (used since the last pass, nothing
        learned above its target, or a step too small to write)."""
        if memory.last_accessed > self.since or weight <= target:
            return None
        unused_since = max(self.since, memory.last_accessed, memory.created_at)
        unused_days = max(0.0, self.now - unused_since) / SECONDS_PER_DAY
        decayed = target + (weight - target) * 0.5 ** (unused_days / HALF_LIFE_DAYS)
        return decayed if weight - decayed >= DECAY_MIN_STEP else None

    def _plan_decay(self) -> Iterator[tuple[str, str, float] | None]:
        state = self.state
        for position, (memory_id, links) in enumerate(list(state.mem_links.items())):
            if position % PLAN_STEP_ITEMS == 0:
                yield None
            memory = state.memories.get(memory_id)
            if memory is None:
                continue
            for link in list(links.values()):
                target = starting_weight(link) if not link.learned else decay_floor(link)
                decayed = self._decayed_weight(memory, link.weight, target)
                if decayed is not None:
                    self.report.decayed_links += 1
                    yield link.key_id, memory_id, decayed

    def _apply_decay(self, item: tuple[str, str, float], now: float) -> bool:
        key_id, memory_id, weight = item
        link = self.state.link(key_id, memory_id)
        if link is None or link.weight <= weight:  # gone, or moved down meanwhile
            return False
        self.state.set_weight(link, weight)
        return True

    # -- key merges --------------------------------------------------------------------------
    def _merge_keys(self) -> Iterator[Step]:
        yield from self._batches(self._plan_merges(), self._apply_merge)

    def _plan_merges(self) -> Iterator[tuple[str, str, str] | None]:
        """(kept, absorbed, reason) per merge: pairs of one form, then pairs sharing memories,
        each group folded into its key with the most active memories."""
        state = self.state
        parent: dict[str, str] = {}

        def root(key_id: str) -> str:
            while key_id in parent:
                key_id = parent[key_id]
            return key_id

        pairs: dict[tuple[str, str], float] = {}  # candidate pair -> shared share
        by_form: dict[tuple[str, str], list[str]] = defaultdict(list)
        for position, key in enumerate(list(state.keys.values())):
            if position % PLAN_STEP_ITEMS == 0:
                yield None
            by_form[(key.namespace, concept_form(key.concept))].append(key.id)
        for group in by_form.values():
            for other in group[1:]:
                pairs[(group[0], other)] = 0.0
        shared: Counter[tuple[str, str]] = Counter()
        for position, (memory_id, links) in enumerate(list(state.mem_links.items())):
            if position % PLAN_STEP_ITEMS == 0:
                yield None
            memory = state.memories.get(memory_id)
            if memory is None or not memory.active(self.now):
                continue
            own = sorted(k for k, link in links.items() if not link.learned)
            shared.update((a, b) for i, a in enumerate(own) for b in own[i + 1 :])
        for position, ((a, b), count) in enumerate(shared.items()):
            if position % PLAN_STEP_ITEMS == 0:
                yield None
            smaller = min(state.active_count.get(a, 0), state.active_count.get(b, 0))
            if smaller > 0 and count / smaller > MERGE_MIN_SHARED:
                pairs[(a, b)] = count / smaller
        for position, ((a, b), share) in enumerate(pairs.items()):
            if position % PLAN_STEP_ITEMS == 0:
                yield None
            first, second = state.keys.get(root(a)), state.keys.get(root(b))
            if first is None or second is None or first.id == second.id:
                continue
            left, right = state.keys.get(a), state.keys.get(b)
            if left is None or right is None:
                continue
            reason = merge_reason(state, left, right, share, self.thresholds)
            if reason is None or siblings(first.concept, second.concept):
                continue
            kept, absorbed = sorted((first, second), key=self._keep_order)
            parent[absorbed.id] = kept.id
            self.report.merged_keys += 1
            if len(self.report.merges) < REPORT_SAMPLE_MAX:
                self.report.merges.append(
                    {
                        "namespace": kept.namespace,
                        "kept": kept.concept,
                        "absorbed": absorbed.concept,
                        "reason": reason,
                    }
                )
            yield kept.id, absorbed.id, reason

    def _keep_order(self, key: KeyRecord) -> tuple[int, float, str]:
        """The key kept in a merge: most active memories, then the oldest."""
        return (-self.state.active_count.get(key.id, 0), key.created_at, key.id)

    def _apply_merge(self, item: tuple[str, str, str], now: float) -> bool:
        kept_id, absorbed_id, _ = item
        state = self.state
        kept, absorbed = state.keys.get(kept_id), state.keys.get(absorbed_id)
        if kept is None or absorbed is None or kept.namespace != absorbed.namespace:
            return False
        merge_keys(state, kept, absorbed, now)
        return True

    # -- flags -------------------------------------------------------------------------------
    def _flag(self) -> Iterator[Step]:
        yield from self._batches(self._plan_flags(), self._apply_flag)

    def _plan_flags(self) -> Iterator[tuple[str, str, str] | None]:
        """(memory, other, kind) per new flag: contradictions from shared sentence patterns,
        then near duplicates from a prefix-filtered similarity join (rarest words first)."""
        state = self.state
        shapes: dict[str, Shape] = {}
        word_sets: dict[str, frozenset[str]] = {}
        by_pattern: dict[tuple[str, tuple[str, ...]], list[str]] = defaultdict(list)
        frequency: dict[str, Counter[str]] = defaultdict(Counter)
        for position, memory in enumerate(list(state.memories.values())):
            if position % PLAN_STEP_ITEMS == 0:
                yield None
            if not memory.active(self.now):
                continue
            shape = shape_of(memory.content)
            if len(shape.pattern) < FLAG_MIN_WORDS:
                continue
            shapes[memory.id] = shape
            by_pattern[(memory.namespace, shape.pattern)].append(memory.id)
            word_sets[memory.id] = frozenset(words(memory.content))
            frequency[memory.namespace].update(word_sets[memory.id])
        flagged: set[tuple[str, str]] = set()
        for position, group in enumerate(by_pattern.values()):
            if position % PLAN_STEP_ITEMS == 0:
                yield None
            if not 2 <= len(group) <= TEMPLATE_GROUP_MAX:
                continue
            for i, a in enumerate(group):
                for b in group[i + 1 :]:
                    if self._contradict(shapes[a], shapes[b], a, b):
                        flagged.add((a, b))
                        yield from self._new_flag(a, b, "contradiction")
        postings: dict[tuple[str, str], list[str]] = defaultdict(list)
        for position, (memory_id, word_set) in enumerate(word_sets.items()):
            if position % PLAN_STEP_ITEMS == 0:
                yield None
            namespace = state.memories[memory_id].namespace
            counts = frequency[namespace]
            ordered = sorted(word_set, key=lambda w: (counts[w], w))
            prefix = len(ordered) - math.ceil(NEAR_DUPLICATE_MIN_JACCARD * len(ordered)) + 1
            seen: set[str] = set()
            for word in ordered[:prefix]:
                posting = postings[(namespace, word)]
                for other in posting:
                    if other in seen:
                        continue
                    seen.add(other)
                    if (other, memory_id) not in flagged and self._near(
                        shapes[other], shapes[memory_id], word_sets[other], word_set
                    ):
                        yield from self._new_flag(other, memory_id, "near_duplicate")
                if counts[word] <= POSTING_MAX:
                    posting.append(memory_id)

    def _contradict(self, a: Shape, b: Shape, a_id: str, b_id: str) -> bool:
        """One sentence with other sibling values or the opposite "not", about a shared key."""
        if a.values == b.values and a.negated == b.negated:
            return False
        links_a, links_b = self.state.mem_links[a_id], self.state.mem_links[b_id]
        return any(k in links_b and not link.learned for k, link in links_a.items())

    @staticmethod
    def _near(a: Shape, b: Shape, left: frozenset[str], right: frozenset[str]) -> bool:
        """Word sets at least NEAR_DUPLICATE_MIN_JACCARD alike, with the same sibling values
        (other values make it another fact, or a contradiction)."""
        if min(len(left), len(right)) < NEAR_DUPLICATE_MIN_JACCARD * max(len(left), len(right)):
            return False
        jaccard = len(left & right) / len(left | right)
        return jaccard >= NEAR_DUPLICATE_MIN_JACCARD and a.values == b.values

    def _new_flag(self, a: str, b: str, kind: str) -> Iterator[tuple[str, str, str]]:
        memory = self.state.memories[a]
        if b in (memory.contradicts if kind == "contradiction" else memory.near_duplicates):
            return
        if kind == "contradiction":
            self.report.contradictions += 1
        else:
            self.report.near_duplicates += 1
        if len(self.report.flags) < REPORT_SAMPLE_MAX:
            self.report.flags.append({"kind": kind, "memory_id": a, "other_id": b})
        yield a, b, kind

    def _apply_flag(self, item: tuple[str, str, str], now: float) -> bool:
        a_id, b_id, kind = item
        pair = [self.state.memories.get(a_id), self.state.memories.get(b_id)]
        if any(m is None or not m.active(now) for m in pair):
            return False
        changed = False
        for memory, other in ((pair[0], b_id), (pair[1], a_id)):
            assert memory is not None
            if other in (memory.contradicts if kind == "contradiction" else memory.near_duplicates):
                continue
            if kind == "contradiction":
                memory.contradicts = (*memory.contradicts, other)
            else:
                memory.near_duplicates = (*memory.near_duplicates, other)
            self.state.changes.rewrite_flags(memory)
            changed = True
        return changed


def merge_keys(state: GraphState, kept: KeyRecord, absorbed: KeyRecord, now: float) -> None:
    """Fold ``absorbed`` into ``kept``: its links move over (the stronger weight wins where
    both link a memory), its concept and aliases become ``kept``'s aliases, its alias
    candidates carry over, and the memories it reached are re-sent to the lexicon."""
    for link in state.unlink_key(absorbed.id):
        existing = state.link(kept.id, link.memory_id)
        if existing is None:
            state.add_link(
                kept.id, link.memory_id, link.weight, auto=link.auto, learned=link.learned
            )
        elif link.weight > existing.weight:
            state.set_weight(existing, link.weight)
    for norm, candidate in absorbed.candidates.items():
        if norm not in kept.candidates:
            kept.candidates[norm] = candidate
            state.changes.rewrite_candidates(kept)
    surfaces = [KeyAlias(absorbed.concept, learned=False, added_at=now), *absorbed.aliases]
    state.delete_key(absorbed)
    for alias in surfaces:
        state.add_alias(kept, alias)
    state.docs_changed_for_key(kept.id)
