"""The MCP ``recall`` tool's content path and preview gates, through every real service.

A small namespace (five memories) is where a word must still find the memory that holds it:
BM25's idf there is near zero, so the content path is gated on the lexicon's coverage, whose
scale does not depend on the namespace's size. The preview is what the agent reads without
asking, so it is held to inject's gates: a real anchor, the query's version, the attribute the
query asks about.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keymem.protocol.errors import BadRequest
from tests.full_stack import FullStack, full_stack

NAMESPACE = "small"
MEMORIES = {
    "panel": ("shared metal device control panel", ["control panel", "device"], {}),
    "busan": ("저는 부산에서 일하고 있어요", ["직장"], {}),
    "release": ("keymem v0.6.1 released with the new hook", ["keymem release"], {}),
    "coffee": ("Donggyun likes coffee", ["Donggyun", "coffee"], {"Donggyun": "name"}),
    "log": ("The deploy log: " + "step ok. " * 300, ["deploy log"], {}),
    "oscar": (
        "Caroline has a guinea pig named Oscar",
        ["Caroline", "Oscar", "pet"],
        {"Caroline": "name", "Oscar": "name"},
    ),
    "race": ("Melanie ran a charity race", ["Melanie", "charity race"], {"Melanie": "name"}),
    "paint": ("Melanie paints sunsets", ["Melanie", "painting"], {"Melanie": "name"}),
}


@pytest.fixture(scope="module")
def small() -> Iterator[FullStack]:
    with tempfile.TemporaryDirectory(prefix="km-") as home, full_stack(Path(home)) as running:
        for name, (content, keys, types) in MEMORIES.items():
            saved = running.memory(
                "remember",
                {"content": content, "keys": keys, "key_types": types, "namespace": NAMESPACE},
            )
            running.ids[name] = saved["saved"]
            running.last_seq = int(saved["seq"])
        running.search("deploy", NAMESPACE)  # waits until the lexicon has every write
        yield running


def recall(running: FullStack, query: str, **options: Any) -> dict[str, Any]:
    reply: dict[str, Any] = running.memory(
        "recall", {"query": query, "namespace": NAMESPACE, **options}
    )
    return reply


def previewed(reply: dict[str, Any]) -> list[str]:
    return [m["id"] for m in reply["memories"]]


def test_a_word_a_short_memory_holds_finds_it_in_a_small_namespace(small: FullStack) -> None:
    found = recall(small, "부산")
    assert found["status"] == "found"
    assert [(k["concept"], k["match_type"]) for k in found["keys"]] == [("직장", "content")]
    # reached through its words only, and not close enough in meaning to show unasked
    assert found["memories"] == [] and found["note"]


def test_a_query_with_no_real_anchor_previews_no_memory(small: FullStack) -> None:
    found = recall(small, "metal")
    assert {k["match_type"] for k in found["keys"]} == {"content"}
    assert found["memories"] == []


def test_a_query_naming_a_version_does_not_preview_another_version(small: FullStack) -> None:
    found = recall(small, "keymem release v0.6.2")
    assert found["status"] == "found" and found["keys"][0]["concept"] == "keymem release"
    assert found["memories"] == [] and "0.6.2" in found["note"]
    assert previewed(recall(small, "keymem release v0.6.1")) == [small.ids["release"]]


def test_the_asked_attribute_must_be_in_the_preview(small: FullStack) -> None:
    found = recall(small, "what does Donggyun drink at night?")
    assert found["keys"][0]["concept"] == "Donggyun" and found["memories"] == []
    assert previewed(recall(small, "Donggyun coffee")) == [small.ids["coffee"]]


def test_a_preview_is_about_the_person_the_query_names(small: FullStack) -> None:
    assert previewed(recall(small, "What pet does Caroline have?")) == [small.ids["oscar"]]
    # Oscar is Caroline's guinea pig: filed under Oscar (the more specific of the two keys the
    # query names, so the anchor), but not an answer about Melanie's pet
    wrong = recall(small, "Is Oscar Melanie's pet?")
    assert [k["concept"] for k in wrong["keys"]][:2] == ["Oscar", "Melanie"]
    assert wrong["memories"] == [] and "someone other than" in wrong["note"]


def test_a_preview_cut_short_says_so_and_how_long_it_was(small: FullStack) -> None:
    (preview,) = recall(small, "deploy log", max_chars=100)["memories"]
    full = len(MEMORIES["log"][0])
    assert len(preview["content"]) == 100
    assert preview["truncated"] is True and preview["content_chars"] == full
    (whole,) = recall(small, "deploy log", max_chars=20_000)["memories"]
    assert whole["truncated"] is False and whole["content"] == MEMORIES["log"][0]


def test_context_feeds_the_content_path_that_finds_keys(small: FullStack) -> None:
    assert recall(small, "where is the office")["status"] == "no_match"
    found = recall(small, "where is the office", context="우리 회사는 부산에서 일하고 있어요")
    assert "직장" in [k["concept"] for k in found["keys"]]


def test_a_miss_offers_the_nearest_keys_and_explain_counts_the_namespace(
    small: FullStack,
) -> None:
    missed = recall(small, "quantum chromodynamics", explain=True)
    assert missed["status"] == "no_match" and len(missed["nearest_keys"]) == 3
    assert missed["explain"]["namespaces"][NAMESPACE]["memories"] == len(MEMORIES)
    assert missed["explain"]["empty_namespace"] is False


@pytest.mark.parametrize(
    "body", [{"query": ""}, {"query": "x", "top_k": 21}, {"query": "x", "max_chars": 0}, []]
)
def test_recall_refuses_a_bad_body(small: FullStack, body: Any) -> None:
    with pytest.raises(BadRequest):
        small.memory("recall", body)


def test_memories_in_another_script_are_read_with_their_writers_names(small: FullStack) -> None:
    # Two Korean articles whose texts differ only in the article's number; the English keys
    # their writer gave them say which crime each punishes. Across scripts navigation reads a
    # memory as search does, its name over its text: read as text alone, both queries put the
    # same article first (the texts score alike), and the preview shows it for both.
    namespace = "statutes"
    burglary = small.remember(
        "제330조를 위반한 자는 10년 이하의 징역에 처한다.", ["statute", "night burglary"], namespace
    )
    fraud = small.remember(
        "제347조를 위반한 자는 10년 이하의 징역에 처한다.", ["statute", "fraud"], namespace
    )
    small.search("statute", namespace)  # waits until the lexicon has both
    found = small.memory(
        "recall", {"query": "which statute punishes a swindler", "namespace": namespace}
    )
    assert [k["concept"] for k in found["keys"]] == ["statute"]
    assert previewed(found) == [fraud]
    intruder = {"query": "which statute sends a home intruder to prison", "namespace": namespace}
    assert previewed(small.memory("recall", intruder)) == [burglary]
    statute = found["keys"][0]["key_id"]
    for query, first in (
        ("the penalty for night burglary", burglary),
        ("the penalty for fraud", fraud),
    ):
        page = small.memory("read_key", {"key_id": statute, "namespace": namespace, "query": query})
        assert page["memories"][0]["memory_id"] == first
