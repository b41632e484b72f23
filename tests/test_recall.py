"""Hybrid recall and inject through the real services: association, comparison, abstention."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keymem.services.evaluation.loader import wait_for_vectors
from tests.full_stack import FullStack, full_stack

NEWTON = "Newton discovered gravity when an apple fell on his head"
APPLES = "Apples are a fruit that grows on trees"
STRAWBERRY = "The user likes strawberries more than any other snack"
TEA = "The user drinks green tea every morning"
NEWTON_KO = "뉴턴은 사과가 떨어지는 것을 보고 중력을 발견했다"
APPLES_KO = "사과는 나무에서 자라는 과일이다"
STRAWBERRY_KO = "사용자는 딸기를 가장 좋아한다"


@pytest.fixture(scope="module")
def deployed() -> Iterator[FullStack]:
    with tempfile.TemporaryDirectory(prefix="km-") as home, full_stack(Path(home)) as running:
        ids = {
            "newton": running.remember(NEWTON, ["Newton", "apple", "gravity"], "en"),
            "apples": running.remember(APPLES, ["apple", "fruit", "tree"], "en"),
            "strawberry": running.remember(STRAWBERRY, ["strawberry", "fruit", "snack"], "en"),
            "tea": running.remember(TEA, ["green tea", "morning routine"], "en"),
            "newton_ko": running.remember(NEWTON_KO, ["뉴턴", "사과", "중력"], "ko"),
            "apples_ko": running.remember(APPLES_KO, ["사과", "과일", "나무"], "ko"),
            "strawberry_ko": running.remember(STRAWBERRY_KO, ["딸기", "과일", "간식"], "ko"),
        }
        running.ids.update(ids)
        yield running


def ranked(result: dict[str, Any]) -> list[str]:
    return [str(m["memory_id"]) for m in result["memories"]]


@pytest.mark.parametrize("namespace,query", [("en", "Newton"), ("ko", "뉴턴")])
def test_hops_reach_what_the_graph_connects_and_no_embedding_would(
    deployed: FullStack, namespace: str, query: str
) -> None:
    ids = deployed.ids
    suffix = "" if namespace == "en" else "_ko"
    with_hops = ranked(deployed.search(query, namespace, hops=2, top_k=5))
    assert with_hops[0] == ids["newton" + suffix]
    # Newton → apple → fruit → strawberry: two hops over shared keys
    assert ids["strawberry" + suffix] in with_hops
    without_hops = ranked(deployed.search(query, namespace, hops=0, top_k=5))
    assert ids["strawberry" + suffix] not in without_hops


def test_search_reports_its_stages_and_labels_every_score(deployed: FullStack) -> None:
    result = deployed.search("apple", "en", timing=True)
    assert result["status"] == "found" and result["degraded"] == {}
    assert set(result["timing_ms"]) == {"analyse", "graph", "rerank", "total"}
    top = result["memories"][0]
    assert top["score_kind"] == "blended_evidence"
    assert top["rerank_kind"] == "embedding_cosine"
    assert top["components"]["key_rank"] is not None


def test_a_comparison_question_gets_evidence_for_both_entities(deployed: FullStack) -> None:
    ids = deployed.ids
    result = deployed.search("Which does the user prefer, green tea or strawberry?", "en", top_k=2)
    assert set(ranked(result)) == {ids["tea"], ids["strawberry"]}


def test_inject_surfaces_the_right_memory_for_a_related_prompt(deployed: FullStack) -> None:
    ids = deployed.ids
    injected = deployed.memory(
        "inject", {"prompt": "what snack should I buy, maybe strawberries?", "namespaces": ["en"]}
    )
    assert injected["memories"] and injected["memories"][0]["id"] == ids["strawberry"]


def test_inject_surfaces_nothing_for_an_unrelated_prompt(deployed: FullStack) -> None:
    injected = deployed.memory(
        "inject",
        {"prompt": "How do I configure TLS certificates in nginx?", "namespaces": ["en"]},
    )
    assert injected["memories"] == []


def test_inject_requires_structured_tokens_verbatim(deployed: FullStack) -> None:
    deployed.remember("Python 3.11.2 fixed the asyncio bug we hit", ["python", "asyncio bug"], "v")
    deployed.remember("Python 3.12.0 changed the asyncio API", ["python", "asyncio api"], "v")
    injected = deployed.memory(
        "inject", {"prompt": "did python 3.11.2 fix our asyncio problem?", "namespaces": ["v"]}
    )
    contents = [m["content"] for m in injected["memories"]]
    assert contents and all("3.11.2" in c for c in contents)
    assert injected["required_tokens"] == ["3.11.2"]


def test_recall_degrades_service_by_service_and_never_hangs(tmp_path: Path) -> None:
    import time

    from keymem.protocol.errors import Unavailable

    with full_stack(tmp_path) as running:
        newton = running.remember(NEWTON, ["Newton", "apple", "gravity"])
        running.remember(STRAWBERRY, ["strawberry", "fruit"])
        deadline_ms = 3_000

        def search(query: str) -> dict[str, Any]:
            started = time.monotonic()
            result: dict[str, Any] = running.client.call(
                "memory",
                "search",
                {"query": query, "min_seq": running.last_seq},
                timeout_ms=deadline_ms,
            )
            assert time.monotonic() - started < deadline_ms / 1000
            return result

        running.workers["reranker"].stop()
        result = search("Newton gravity")
        assert set(result["degraded"]) == {"reranker"}, result["degraded"]
        assert ranked(result)[0] == newton
        top = result["memories"][0]  # ranked by the graph's evidence alone, and labelled so
        assert top["score_kind"] == "blended_evidence" and "rerank_score" not in top

        running.workers["lexicon"].stop()
        result = search("Newton gravity")
        assert set(result["degraded"]) == {"reranker", "lexicon"}
        assert ranked(result)[0] == newton  # keys alone still find it

        running.workers["embedder"].stop()
        result = search("what did Newton find?")
        assert set(result["degraded"]) == {"reranker", "lexicon", "embedder"}
        assert ranked(result)[0] == newton  # the literal name key still matches

        running.workers["graph"].stop()
        started = time.monotonic()
        with pytest.raises(Unavailable):
            search("Newton")
        assert time.monotonic() - started < deadline_ms / 1000


def _key_id(result: dict[str, Any], concept: str) -> str:
    for key in result["keys"]:
        if key["concept"] == concept:
            return str(key["key_id"])
    raise AssertionError(f"{concept!r} not among {[k['concept'] for k in result['keys']]}")


@pytest.mark.parametrize(
    "namespace,start,bridge,hub,suffix",
    [("en", "Newton", "apple", "fruit", ""), ("ko", "뉴턴", "사과", "과일", "_ko")],
)
def test_the_key_walk_reaches_the_strawberry_one_deliberate_step_at_a_time(
    deployed: FullStack, namespace: str, start: str, bridge: str, hub: str, suffix: str
) -> None:
    ids = deployed.ids
    found = deployed.memory("recall", {"query": start, "namespace": namespace})
    assert found["status"] == "found" and found["keys"][0]["concept"] == start
    (preview,) = found["memories"]
    assert preview["id"] == ids["newton" + suffix]
    assert preview["evidence"] == "passive_preview" and preview["reinforced"] is False
    bridge_key = next(k for k in preview["connected_keys"] if k["concept"] == bridge)
    handles = deployed.memory(
        "read_key",
        {
            "key_id": bridge_key["key_id"],
            "query": "what kind of thing is it",
            "namespace": namespace,
        },
    )
    assert ids["apples" + suffix] in [h["memory_id"] for h in handles["memories"]]
    apples = deployed.memory(
        "read_memory",
        {
            "memory_id": ids["apples" + suffix],
            "via_key_id": bridge_key["key_id"],
            "namespace": namespace,
        },
    )
    hub_key = next(k for k in apples["memory"]["keys"] if k["concept"] == hub)
    members = deployed.memory("read_key", {"key_id": hub_key["key_id"], "namespace": namespace})
    assert ids["strawberry" + suffix] in [h["memory_id"] for h in members["memories"]]


def test_recall_crosses_languages_through_key_vectors(deployed: FullStack) -> None:
    found = deployed.memory("recall", {"query": "딸기", "namespace": "en"})
    assert found["status"] == "found"
    assert found["keys"][0]["concept"] == "strawberry"
    assert found["keys"][0]["match_type"] == "semantic"
    assert found["memories"][0]["id"] == deployed.ids["strawberry"]


def test_recall_changes_nothing_and_a_miss_offers_the_nearest_keys(deployed: FullStack) -> None:
    tea = {"ids": [deployed.ids["tea"]], "namespace": "en"}
    before = deployed.client.call("graph", "get_memories", tea)
    found = deployed.memory("recall", {"query": "green tea", "namespace": "en", "explain": True})
    assert found["memories"][0]["id"] == deployed.ids["tea"]
    assert found["explain"]["empty_namespace"] is False
    after = deployed.client.call("graph", "get_memories", tea)
    assert after == before  # no access count, no weight, no freshness changed
    missed = deployed.memory("recall", {"query": "quantum chromodynamics", "namespace": "en"})
    assert missed["status"] == "no_match" and missed["memories"] == []
    assert len(missed["nearest_keys"]) == 3 and "note" in missed


def test_a_search_changes_no_link_weight(tmp_path: Path) -> None:
    with full_stack(tmp_path) as running:
        running.remember("Newton discovered gravity", ["Newton", "gravity"])
        running.remember("Gravity bends light", ["gravity", "light"])

        def weights() -> dict[str, float]:
            found = running.memory("recall", {"query": "gravity"})
            key_id = next(k["key_id"] for k in found["keys"] if k["concept"] == "gravity")
            handles = running.memory("read_key", {"key_id": key_id})["memories"]
            return {h["memory_id"]: h["link_weight"] for h in handles}

        before = weights()
        running.search("Newton gravity", top_k=1)
        assert weights() == before  # only a read of what inject surfaced teaches the graph


def test_a_previews_connected_keys_come_most_relevant_first(deployed: FullStack) -> None:
    found = deployed.memory("recall", {"query": "Newton and the fruit", "namespace": "en"})
    connected = found["memories"][0]["connected_keys"]
    relevances = [k["relevance"] for k in connected]
    assert all(isinstance(r, float) for r in relevances)
    assert relevances == sorted(relevances, reverse=True)


def test_an_empty_store_answers_no_match_instead_of_an_error(tmp_path: Path) -> None:
    with full_stack(tmp_path) as running:
        assert running.memory("recall", {"query": "Newton"})["status"] == "no_match"
        assert running.search("Newton")["status"] == "no_match"
        assert running.memory("inject", {"prompt": "what did Newton discover?"})["memories"] == []


def test_a_keyless_memory_gets_weaker_auto_keys_that_recall_and_hops_use(
    tmp_path: Path,
) -> None:
    with full_stack(tmp_path) as running:
        newton = running.remember(NEWTON, ["Newton", "apple", "gravity"])
        saved = running.memory(
            "remember", {"content": "Newton also split white light with a prism in Cambridge"}
        )
        running.last_seq = int(saved["seq"])
        memory = running.memory("read_memory", {"memory_id": saved["saved"]})["memory"]
        keys = {k["concept"]: k for k in memory["keys"]}
        assert "Newton" in keys  # the namespace's existing key, found in the text
        assert "Cambridge" in keys  # a name the lexicon extracted
        assert all(k["auto"] and k["link_weight"] == 0.5 for k in keys.values())
        found = running.memory("recall", {"query": "Cambridge"})
        assert found["memories"][0]["id"] == saved["saved"]
        # the shared Newton key connects the two memories for the key walk and hops
        related = ranked(running.search("prism", hops=2, top_k=5))
        assert related[0] == saved["saved"] and newton in related


def test_three_agent_keys_are_left_alone(tmp_path: Path) -> None:
    with full_stack(tmp_path) as running:
        saved = running.remember(APPLES, ["apple", "fruit", "tree"])
        memory = running.memory("read_memory", {"memory_id": saved})["memory"]
        assert sorted(k["concept"] for k in memory["keys"]) == ["apple", "fruit", "tree"]
        assert not any(k["auto"] for k in memory["keys"])


def test_one_agent_key_is_joined_only_by_keys_the_text_names(tmp_path: Path) -> None:
    with full_stack(tmp_path) as running:
        running.remember(NEWTON, ["Newton", "apple", "gravity"])
        saved = running.remember("Newton studied optics in Cambridge", ["optics"])
        memory = running.memory("read_memory", {"memory_id": saved})["memory"]
        concepts = {k["concept"]: k["auto"] for k in memory["keys"]}
        assert concepts == {"optics": False, "Newton": True}  # no extracted "Cambridge"


def test_an_english_question_finds_a_korean_memory_no_key_names(tmp_path: Path) -> None:
    """No word of the question is in the store and the question's words land on the wrong
    memories' keys (person → 사람): the memory's own text vector, made in the memory service's
    idle time, proposes it (the dense leg)."""
    deposit = "임대인은 임대차가 끝나면 임차인에게 보증금을 즉시 반환하여야 한다."
    others = [
        "사람은 누구나 법 앞에 평등하다.",
        "모든 사람은 주거의 자유를 가진다.",
        "국가는 사람의 건강을 보호하여야 한다.",
        "회사는 매년 결산을 공고하여야 한다.",
        "운동 경기의 심판은 공정하여야 한다.",
    ]
    with full_stack(tmp_path) as running:
        gold = running.remember(deposit, ["제3조", "부칙", "개정 2020"], "law")
        for text in others:
            saved = running.memory("remember", {"content": text, "namespace": "law"})
            running.last_seq = int(saved["seq"])
        wait_for_vectors(running.client)
        result = running.search(
            "When must a landlord give the deposit back to the person renting?", "law", top_k=3
        )
        assert result["degraded"] == {}
        assert {k["match_type"] for k in result["keys"]} <= {"semantic", "phrase"}
        assert ranked(result)[0] == gold
