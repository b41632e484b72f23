"""Benchmark files: the committed fixtures load, malformed files fail with a clear typed error."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from keymem.services.evaluation.dataset import (
    DEFAULT_NAMESPACE,
    Benchmark,
    DatasetError,
    load_benchmark,
    parse_benchmark,
)
from keymem.services.evaluation.loader import check_key_mode, default_key_mode, keys_for

FIXTURES = Path(__file__).parent / "fixtures"
POOLED = FIXTURES / "eval_tiny.json"
PER_QUERY = FIXTURES / "eval_tiny_per_query.json"


def raw(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def test_fixtures_load() -> None:
    pooled = load_benchmark(POOLED)
    assert (pooled.setting, len(pooled.memories), len(pooled.queries)) == ("pooled", 8, 5)
    assert [q.answerable for q in pooled.queries] == [True, True, True, True, False]
    assert pooled.memories[0].namespace == DEFAULT_NAMESPACE
    assert pooled.memories[0].document.startswith("Isaac Newton\nIsaac Newton formulated")
    # pooled: a query may be answered from every memory of its namespace
    assert len(pooled.candidates(pooled.queries[0])) == 8
    per_query = load_benchmark(PER_QUERY)
    assert per_query.candidates(per_query.queries[0]) == ("m1", "m2", "m7", "m8", "m9")


def test_limit_keeps_only_the_memories_the_first_queries_use() -> None:
    limited = load_benchmark(PER_QUERY).limited(2)
    assert [q.id for q in limited.queries] == ["q1", "q2"]
    assert {m.id for m in limited.memories} == {"m1", "m2", "m3", "m6", "m7", "m8", "m9"}
    assert len(load_benchmark(POOLED).limited(2).memories) == 8


def test_key_modes() -> None:
    bench = load_benchmark(POOLED)
    assert default_key_mode(bench) == "provided"
    assert keys_for(bench.memories[0], "provided") == ["Isaac Newton", "laws of motion"]
    assert keys_for(bench.memories[0], "title") == ["Isaac Newton"]
    assert keys_for(bench.memories[0], "auto") is None
    document = raw(POOLED)
    for memory in document["memories"]:
        memory["keys"] = None
        memory.pop("key_types", None)
    keyless = parse_benchmark(document)
    assert default_key_mode(keyless) == "title"
    with pytest.raises(DatasetError, match="has no keys"):
        check_key_mode(keyless, "provided")
    for memory in document["memories"]:
        memory["title"] = None
    untitled = parse_benchmark(document)
    assert default_key_mode(untitled) == "auto"
    with pytest.raises(DatasetError, match="no titles"):
        check_key_mode(untitled, "title")


def test_key_types_and_keyed_documents() -> None:
    bench = load_benchmark(POOLED)
    newton, apple = bench.memories[0], bench.memories[1]
    assert newton.key_types == {"Isaac Newton": "name"} and apple.key_types == {}
    # the +keys baselines index the document with the keys appended
    assert newton.keyed_document == f"{newton.document}\nIsaac Newton laws of motion"


def broken(path: Path, change: Any) -> dict[str, Any]:
    document = copy.deepcopy(raw(path))
    change(document)
    return document


@pytest.mark.parametrize(
    ("path", "change", "message"),
    [
        (POOLED, lambda d: d.update(setting="mixed"), "'setting' must be one of"),
        (POOLED, lambda d: d.update(memories=[]), "'memories' must be a non-empty list"),
        (POOLED, lambda d: d["memories"][2].pop("content"), "memory 'm3': 'content'"),
        (POOLED, lambda d: d["memories"][1].update(id="m1"), "memory id 'm1' appears twice"),
        (POOLED, lambda d: d["memories"][0].update(keys="apple"), "'keys' must be a list"),
        (
            POOLED,
            lambda d: d["memories"][0].update(key_types={"Isaac Newton": "person"}),
            "memory 'm1': 'key_types' must map keys to one of name, proper_noun",
        ),
        (
            POOLED,
            lambda d: d["memories"][0].update(key_types={"Newton": "name"}),
            "'key_types' names ['Newton'], which are not among its keys",
        ),
        (POOLED, lambda d: d["queries"][0].update(gold=["m99"]), "gold memory 'm99' does not"),
        (POOLED, lambda d: d["queries"][0].update(gold="m1"), "query 'q1': 'gold' must be"),
        (POOLED, lambda d: d["queries"][1].update(query=""), "query 'q2': 'query'"),
        (POOLED, lambda d: d["queries"].append(d["queries"][0]), "query id 'q1' appears twice"),
        (POOLED, lambda d: d["queries"][0].update(gold_all_required="yes"), "gold_all_required"),
        (
            POOLED,
            lambda d: d["memories"][0].update(namespace="other"),
            "gold memory 'm1' is in namespace 'other'",
        ),
        (PER_QUERY, lambda d: d["queries"][0].update(memory_ids=None), "needs 'memory_ids'"),
        (PER_QUERY, lambda d: d["queries"][0].update(memory_ids=["m2"]), "not among its"),
        (PER_QUERY, lambda d: d["queries"][0].update(memory_ids=["m1", "x"]), "'x' does not"),
        (POOLED, lambda d: d["queries"].__setitem__(0, "q1"), "queries[0]: expected an object"),
    ],
)
def test_malformed_files_name_the_problem(path: Path, change: Any, message: str) -> None:
    with pytest.raises(DatasetError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_benchmark(broken(path, change))


def test_unreadable_and_non_json_files(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="cannot read"):
        load_benchmark(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DatasetError, match="not JSON"):
        load_benchmark(bad)
    top = tmp_path / "list.json"
    top.write_text("[]")
    with pytest.raises(DatasetError, match="expected an object"):
        load_benchmark(top)


def test_benchmark_is_a_value() -> None:
    bench = load_benchmark(POOLED)
    assert isinstance(bench, Benchmark) and bench == load_benchmark(POOLED)
