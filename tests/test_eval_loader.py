"""How the eval places benchmark memories in keymem and reads keymem's ids back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from keymem.protocol.errors import BadRequest
from keymem.protocol.limits import BATCH_MAX_ITEMS, CONTENT_MAX_CHARS
from keymem.protocol.worker import Service
from keymem.services.evaluation.dataset import load_benchmark, parse_benchmark
from keymem.services.evaluation.loader import LoadedStore, LoadError, load, query_namespace
from keymem.services.evaluation.progress import SILENT
from keymem.services.stack import InprocStack
from tests.full_stack import full_stack

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


class RecordingMemory:
    """A ``memory`` service double that stores nothing and answers like the graph does."""

    def __init__(self) -> None:
        self.batches: list[list[dict[str, Any]]] = []
        self.seen: dict[tuple[str, str], str] = {}  # (namespace, content) -> id

    def remember_batch(self, body: Any) -> Any:
        self.batches.append(body["items"])
        results: list[dict[str, Any]] = []
        for item in body["items"]:
            new_id = f"k{sum(len(b) for b in self.batches)}-{len(results)}"
            result: dict[str, Any] = {"saved": new_id}
            earlier = self.seen.get((item["namespace"], item["content"]))
            if earlier is not None:
                result["superseded"] = earlier
            self.seen[(item["namespace"], item["content"])] = new_id
            results.append(result)
        return {"results": results, "seq": len(self.batches)}


def test_load_batches_places_cuts_and_maps(stack: InprocStack) -> None:
    recorder = RecordingMemory()
    memory = Service("memory")
    memory.add("remember_batch", recorder.remember_batch)
    lexicon = Service("lexicon")
    lexicon.add("search", lambda body: {"caught_up": True, "hits": []})
    graph = Service("graph")  # every memory has its passage vector
    graph.add("vector_backlog", lambda body: {"missing": 0, "fingerprint": None, "memories": []})
    stack.add_worker(memory)
    stack.add_worker(lexicon)
    stack.add_worker(graph)
    long_content = "x" * (CONTENT_MAX_CHARS + 5)
    memories = [
        {"id": f"m{i}", "content": f"memory {i}", "title": f"t{i}", "keys": None, "namespace": None}
        for i in range(BATCH_MAX_ITEMS + 1)
    ]
    memories.append({"id": "long", "content": long_content, "title": None, "keys": None})
    memories.append({"id": "copy", "content": "memory 0", "title": "t0", "keys": None})
    queries = [{"id": "q", "query": "memory", "gold": ["m1"], "memory_ids": None}]
    bench = parse_benchmark({"setting": "pooled", "memories": memories, "queries": queries})
    store = load(stack.client(), bench, "title", SILENT)
    assert [len(b) for b in recorder.batches] == [BATCH_MAX_ITEMS, 3]  # the graph's limit
    items = [item for batch in recorder.batches for item in batch]
    assert items[0] == {"content": "memory 0", "namespace": "default", "keys": ["t0"]}
    assert "keys" not in items[-2] and len(items[-2]["content"]) == CONTENT_MAX_CHARS
    assert (store.written, store.truncated, store.keyless, store.merged) == (203, 1, 1, 1)
    assert store.last_seq == 2 and store.namespaces == ["default"]
    # "copy" repeats m0's content: the surviving id stands for both
    survivor = recorder.seen[("default", "memory 0")]
    assert store.to_benchmark([survivor]) == ["m0", "copy"]


def test_a_refused_keyless_write_says_what_to_do(stack: InprocStack) -> None:
    def refuse(body: Any) -> Any:
        raise BadRequest("item 0: keys must be a non-empty list of strings", {"item": 0})

    memory = Service("memory")
    memory.add("remember_batch", refuse)
    stack.add_worker(memory)
    bench = load_benchmark(FIXTURES / "eval_tiny.json")
    with pytest.raises(LoadError, match=r"without keys .* use --keys title"):
        load(stack.client(), bench, "auto", SILENT)
    document = json.loads((FIXTURES / "eval_tiny.json").read_text())
    for item in document["memories"]:
        item["title"] = item["keys"] = item["key_types"] = None
    bare = parse_benchmark(document)
    with pytest.raises(LoadError, match="neither keys nor titles"):
        load(stack.client(), bare, "auto", SILENT)


def test_provided_key_types_reach_the_graph(tmp_path: Path) -> None:
    """An agent's name keys are stored as names (matched literally), the rest as concepts."""
    bench = load_benchmark(FIXTURES / "eval_tiny.json")
    with full_stack(tmp_path) as running:
        load(running.client, bench, "provided", SILENT)
        keys = running.memory("browse_keys", {"namespace": "default", "limit": 100})["keys"]
    types = {key["concept"]: key["key_type"] for key in keys}
    assert types["Isaac Newton"] == types["Marie Curie"] == "name"
    assert types["laws of motion"] == types["Nobel prize"] == "concept"
