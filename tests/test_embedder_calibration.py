"""The committed USE-m threshold profile against the committed bilingual key fixture.

Re-runs the calibration's fixture half (the benchmark half needs ../shared/data and minutes),
so a changed model, fixture or rule that would move the thresholds fails here.
"""

from __future__ import annotations

import pytest

from keymem.services.embedder.backends.usem3 import MODEL_ID
from keymem.services.embedder.calibrate import PairSet, choose, fixture_sets, score_sets
from keymem.services.embedder.thresholds import FALLBACK, PROFILES, profile_for
from tests.full_stack import scoring_model


@pytest.fixture(scope="module")
def sets() -> dict[str, PairSet]:
    scored = fixture_sets()
    score_sets(scoring_model(), scored)
    return {s.name: s for s in scored}


def test_fixture_is_a_few_hundred_pairs(sets: dict[str, PairSet]) -> None:
    assert sum(len(s.pairs) for s in sets.values()) >= 700
    assert len(sets["synonyms, cross-lingual (ko/en/ja)"].pairs) == 240


def test_merge_thresholds_reproduce_from_the_fixture(sets: dict[str, PairSet]) -> None:
    chosen = choose(sets)
    profile = PROFILES[MODEL_ID]
    assert chosen["key_merge"] == profile.key_merge
    assert chosen["short_key_merge"] == profile.short_key_merge


def test_profile_separates_what_it_claims(sets: dict[str, PairSet]) -> None:
    profile = profile_for(MODEL_ID)
    assert profile.calibrated
    assert sets["near misses, both short"].rate_at_or_above(profile.short_key_merge) == 0.0
    assert sets["near misses (distinct, same domain)"].rate_at_or_above(profile.key_merge) <= 0.02
    assert sets["synonyms, cross-lingual (ko/en/ja)"].rate_at_or_above(profile.key_recall) >= 0.95
    assert sets["unrelated keys"].rate_at_or_above(profile.key_recall) <= 0.05
    assert profile.alias_floor <= profile.key_recall < profile.key_merge <= profile.short_key_merge


def test_unknown_model_gets_the_marked_fallback() -> None:
    assert profile_for("some-new-model") is FALLBACK
    assert FALLBACK.calibrated is False
