"""``keymem eval``'s metrics on rankings worked out by hand (README's definitions)."""

from __future__ import annotations

import pytest

from keymem.services.evaluation.metrics import (
    ScoreSheet,
    all_at,
    hit_at,
    recall_at,
    reciprocal_rank,
)

RANKING = ["m4", "m1", "m7", "m3", "m2"]


def test_single_query_metrics_by_hand() -> None:
    gold = ["m1", "m3"]  # at ranks 2 and 4
    assert recall_at(RANKING, gold, 1) == 0.0
    assert recall_at(RANKING, gold, 2) == 0.5
    assert recall_at(RANKING, gold, 4) == 1.0
    assert all_at(RANKING, gold, 3) == 0.0
    assert all_at(RANKING, gold, 4) == 1.0
    assert hit_at(RANKING, gold, 1) == 0.0
    assert hit_at(RANKING, gold, 2) == 1.0
    assert reciprocal_rank(RANKING, gold) == 0.5


def test_gold_never_ranked_scores_zero_and_k_beyond_the_list_is_fine() -> None:
    assert recall_at(RANKING, ["m9"], 10) == 0.0
    assert hit_at([], ["m1"], 5) == 0.0
    assert reciprocal_rank(RANKING, ["m9"]) == 0.0
    assert all_at(RANKING, ["m2", "m4"], 10) == 1.0


def test_sheet_averages_per_query_overall_and_per_type() -> None:
    sheet = ScoreSheet((1, 3))
    sheet.add("bridge", RANKING, ["m1", "m3"])  # r@1 0, r@3 .5, all@3 0, hit@1 0, hit@3 1, rr .5
    sheet.add("bridge", RANKING, ["m4"])  # r@1 1, r@3 1, all@1 1, hit@1 1, rr 1
    sheet.add("comparison", RANKING, ["m2", "m9"])  # r@3 0, rr 1/5
    overall = sheet.summary()
    assert overall.queries == 3
    assert overall.recall[1] == pytest.approx((0 + 1 + 0) / 3)
    assert overall.recall[3] == pytest.approx((0.5 + 1 + 0) / 3)
    assert overall.all[3] == pytest.approx((0 + 1 + 0) / 3)
    assert overall.hit[3] == pytest.approx((1 + 1 + 0) / 3)
    assert overall.mrr == pytest.approx((0.5 + 1 + 0.2) / 3)
    bridge = sheet.summary("bridge")
    assert bridge.queries == 2
    assert bridge.recall[3] == pytest.approx(0.75)
    assert bridge.mrr == pytest.approx(0.75)
    assert sheet.summary("comparison").mrr == pytest.approx(0.2)
    assert sheet.types() == ["bridge", "comparison"]
    assert sheet.summary("missing").queries == 0


def test_empty_gold_is_not_scored() -> None:
    with pytest.raises(ValueError, match="not-found"):
        ScoreSheet((5,)).add("abstention", RANKING, [])
