"""How the eval places benchmark memories in keymem and reads keymem's ids back."""

from __future__ import annotations

from pathlib import Path

from services.evaluation.dataset import load_benchmark
from services.evaluation.loader import LoadedStore, query_namespace

FIXTURES = Path(__file__).parent / "fixtures"


def test_keymem_ranking_maps_back_to_benchmark_ids() -> None:
    store = LoadedStore(namespaces=["default"])
    store.benchmark_ids = {"k1": ["m1"], "k2": ["m7", "m9"], "k3": ["m3"]}  # k2: merged copies
    # unknown ids (not written by this run) are dropped; a merged id stands for both copies,
    # in file order, each once
    assert store.to_benchmark(["k2", "zz", "k1", "k2"]) == ["m7", "m9", "m1"]
    assert store.to_benchmark([]) == []


def test_per_query_files_get_one_namespace_per_question_pooled_keep_theirs() -> None:
    per_query = load_benchmark(FIXTURES / "eval_tiny_per_query.json")
    names = [query_namespace(per_query, i, q) for i, q in enumerate(per_query.queries)]
    assert names == ["eval-q0", "eval-q1", "eval-q2", "eval-q3", "eval-q4"]
    pooled = load_benchmark(FIXTURES / "eval_tiny.json")
    assert {query_namespace(pooled, i, q) for i, q in enumerate(pooled.queries)} == {"default"}
