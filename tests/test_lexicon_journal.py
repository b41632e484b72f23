"""The lexicon's journal on its own: which records a restart replays onto the cache it loaded.

A cache save captured at seq S rotates the journal; when that save never reaches the disk (a
kill -9 while writing), the cache on disk is still the one before, and the replay must chain
the rotated file and the current one. A journal that does not continue the loaded cache must
be dropped, never applied.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from keymem.services.lexicon.index import LexiconIndex
from keymem.services.lexicon.journal import JOURNAL_FILE, Journal
from keymem.services.lexicon.sync import text_digest

EPOCH = "e1"


def _upsert(index: LexiconIndex, journal: Journal, seq: int, doc_id: str, text: str) -> None:
    terms = Counter(text.split())
    index.upsert(doc_id, "ns", text_digest(text), terms)
    journal.upsert(seq, doc_id, "ns", text_digest(text), terms)


def _state(index: LexiconIndex) -> dict[str, dict[str, int]]:
    return {d: index.namespaces["ns"].terms_of(d) for d in sorted(index.ids("ns"))}


def _written(home: Path) -> tuple[LexiconIndex, dict[str, dict[str, int]]]:
    """Seq 10: the cache on disk (m1). A save captured at seq 12 never finished; seq 13 came
    after it. Returns the index as of seq 10 and the state every change reaches."""
    at_cache = LexiconIndex()
    at_cache.upsert("m1", "ns", text_digest("alpha beta"), Counter(["alpha", "beta"]))
    live = LexiconIndex()
    live.upsert("m1", "ns", text_digest("alpha beta"), Counter(["alpha", "beta"]))
    journal = Journal(home)
    journal.rotate(EPOCH, 10)
    _upsert(live, journal, 11, "m2", "gamma delta")
    journal.head(12)
    journal.rotate(EPOCH, 12)  # the capture whose save was killed: no journal.saved()
    _upsert(live, journal, 13, "m1", "alpha epsilon")
    live.remove("m2")
    journal.delete(14, "m2")
    journal.flush()
    return at_cache, _state(live)


def test_replay_chains_the_rotated_file_when_the_save_never_finished(tmp_path: Path) -> None:
    index, final = _written(tmp_path)
    seq, applied = Journal(tmp_path).replay(index, EPOCH, 10)
    assert (seq, applied) == (14, 4)
    assert _state(index) == final


def test_replay_starts_at_the_file_that_continues_the_cache(tmp_path: Path) -> None:
    _, final = _written(tmp_path)
    at_12 = LexiconIndex()  # as if the save at 12 had finished: m1 and m2
    at_12.upsert("m1", "ns", text_digest("alpha beta"), Counter(["alpha", "beta"]))
    at_12.upsert("m2", "ns", text_digest("gamma delta"), Counter(["gamma", "delta"]))
    seq, applied = Journal(tmp_path).replay(at_12, EPOCH, 12)
    assert (seq, applied) == (14, 2)
    assert _state(at_12) == final


def test_a_journal_that_does_not_continue_the_cache_is_dropped(tmp_path: Path) -> None:
    index, _ = _written(tmp_path)
    before = _state(index)
    journal = Journal(tmp_path)
    assert journal.replay(index, "another-epoch", 10) == (10, 0)
    assert _state(index) == before
    assert not journal.active
    assert not (tmp_path / JOURNAL_FILE).exists()
