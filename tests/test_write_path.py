"""The write path through the real services: read-your-writes, deterministic auto-keys, the
key union of an exact re-save, correct's key inheritance, remember's hints and a near-miss
query the graph learns."""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keymem.protocol.errors import BadRequest
from keymem.services.evaluation.dataset import load_benchmark
from keymem.services.evaluation.loader import KeyMode, LoadedStore, load
from keymem.services.evaluation.progress import Progress
from tests.full_stack import FullStack, full_stack

FIXTURES = Path(__file__).parent / "fixtures"
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
READ_YOUR_WRITES_ROUNDS = 25


@pytest.fixture(scope="module")
def deployed() -> Iterator[FullStack]:
    with tempfile.TemporaryDirectory(prefix="km-") as home, full_stack(Path(home)) as running:
        yield running


def found_ids(result: dict[str, Any]) -> list[str]:
    return [str(m["memory_id"]) for m in result["memories"]]


def keys_of(running: FullStack, memory_id: str, namespace: str = "default") -> dict[str, Any]:
    """concept -> key (with ``link_weight`` and ``auto``) of one memory."""
    view = running.memory("get_memories", {"ids": [memory_id], "namespace": namespace})
    return {k["concept"]: k for k in view["memories"][0]["keys"]}


def test_a_remembered_fact_is_found_by_the_very_next_search_recall_and_inject(
    deployed: FullStack,
) -> None:
    """No caller passes a ``seq``: the memory service makes every lexicon read wait for the
    writes it acknowledged. The query word is in the text only (no key names it), so only the
    lexicon can find it: search's BM25 list, recall's content match (the keys of a memory whose
    text holds the query), inject's candidates."""
    namespace = "ryw"
    found = {"search": 0, "recall": 0, "inject": 0}
    for _ in range(READ_YOUR_WRITES_ROUNDS):
        word = f"zq{secrets.token_hex(4)}"
        saved = deployed.memory(
            "remember",
            {
                "content": f"The courier left parcel {word} at the blue door of the bakery",
                "keys": ["delivery", "courier", "bakery door"],
                "namespace": namespace,
            },
        )["saved"]
        searched = deployed.memory("search", {"query": word, "namespace": namespace})
        found["search"] += saved in found_ids(searched)
        recalled = deployed.memory("recall", {"query": word, "namespace": namespace})
        found["recall"] += any(k["match_type"] == "content" for k in recalled["keys"])
        injected = deployed.memory(
            "inject",
            {"prompt": f"where did the courier leave parcel {word}?", "namespaces": [namespace]},
        )
        found["inject"] += saved in [m["id"] for m in injected["memories"]]
    assert found == dict.fromkeys(found, READ_YOUR_WRITES_ROUNDS)


def test_an_exact_resave_with_fewer_keys_keeps_every_key(deployed: FullStack) -> None:
    content = "Choco the dog hides under the bed when it thunders"
    first = deployed.memory(
        "remember",
        {
            "content": content,
            "keys": ["dog", "강아지", "Choco", "thunder", "pet fear"],
            "namespace": "union",
        },
    )["saved"]
    again = deployed.memory("remember", {"content": content, "keys": ["dog"], "namespace": "union"})
    assert again["superseded"] == first and again["deduplicated"] is True
    keys = keys_of(deployed, again["saved"], "union")
    assert {"dog", "강아지", "Choco", "thunder", "pet fear"} <= set(keys)
    assert keys["강아지"]["link_weight"] == 1.0 and not keys["강아지"]["auto"]
    recalled = deployed.memory("recall", {"query": "강아지", "namespace": "union"})
    assert [m["id"] for m in recalled["memories"]] == [again["saved"]]


def embedded(running: FullStack) -> int:
    """Texts the embedder has been asked for so far (its cache's hits and misses)."""
    cache = running.client.call("embedder", "info", {})["cache"]
    return int(cache["hits"] + cache["misses"])


def test_remember_embeds_only_new_keys_and_asks_the_lexicon_nothing_when_given_keys(
    deployed: FullStack,
) -> None:
    """The keys a text names are found by the graph inside the write: they need no vectors
    (the graph has them) and no lexicon (a memory with keys takes no extracted candidates)."""
    namespace = "hotpath"
    deployed.memory(
        "remember",
        {
            "content": "Newton discovered gravity when an apple fell",
            "keys": ["Newton", "apple", "gravity"],
            "namespace": namespace,
        },
    )

    def lexicon_requests() -> int:
        return int(deployed.client.call("lexicon", "stats", {})["requests"])

    texts, requests = embedded(deployed), lexicon_requests()
    saved = deployed.memory(
        "remember",
        {
            "content": "Newton studied optics in Cambridge, apple in hand",
            "keys": ["optics"],
            "namespace": namespace,
        },
    )["saved"]
    assert embedded(deployed) - texts == 1  # "optics" only
    assert lexicon_requests() - requests == 1  # the previous stats call, nothing else
    keys = keys_of(deployed, saved, namespace)
    assert {c: k["auto"] for c, k in keys.items()} == {
        "optics": False,
        "Newton": True,
        "apple": True,
    }


def test_keys_the_store_holds_under_the_same_text_are_not_embedded_again(
    deployed: FullStack,
) -> None:
    """A held key's vector comes from the graph: only keys new to the namespace (or written
    another way, "Harbour" for "harbour") reach the embedder, singly and in a batch, and the
    memory is still filed under the very same keys."""
    namespace = "held"
    first = deployed.memory(
        "remember",
        {
            "content": "The lighthouse at the harbour sounds its fog horn at dusk",
            "keys": ["harbour", "lighthouse", "fog horn"],
            "namespace": namespace,
        },
    )["saved"]
    before = embedded(deployed)
    second = deployed.memory(
        "remember",
        {
            "content": "The lighthouse keeper rows across the harbour every morning",
            "keys": ["lighthouse", " harbour ", "keeper", "Harbour"],
            "namespace": namespace,
        },
    )["saved"]
    # "keeper": "Harbour" repeats " harbour " in one memory (dropped, as the graph drops a
    # key's case-insensitive repeat), so it needs no vector
    assert embedded(deployed) - before == 1
    first_keys, second_keys = (
        keys_of(deployed, first, namespace),
        keys_of(deployed, second, namespace),
    )
    for concept in ("harbour", "lighthouse"):
        assert second_keys[concept]["key_id"] == first_keys[concept]["key_id"]
    before = embedded(deployed)
    deployed.memory(
        "remember",
        {"content": "Harbour lights", "keys": ["Harbour", "lighthouse"], "namespace": namespace},
    )
    assert embedded(deployed) - before == 1  # "Harbour": held only under exactly its text
    before = embedded(deployed)
    items = [
        {"content": "Fog rolls in from the harbour", "keys": ["fog horn", "keeper"]},
        {"content": "The tide table hangs in the lighthouse", "keys": ["tide table"]},
    ]
    batch = deployed.memory(
        "remember_batch", {"items": [{**item, "namespace": namespace} for item in items]}
    )
    assert len(batch["results"]) == 2
    assert embedded(deployed) - before == 1  # "tide table"
    # in another namespace the same text is not held: it is embedded
    before = embedded(deployed)
    deployed.memory("remember", {"content": "A harbour far away", "keys": ["harbour"]})
    assert embedded(deployed) - before == 1


def test_held_vectors_refuses_keys_that_are_not_a_list_of_strings(deployed: FullStack) -> None:
    with pytest.raises(BadRequest, match="keys must be a list of strings"):
        deployed.client.call("graph", "held_vectors", {"keys": "harbour"})


def store_keys(running: FullStack, loaded: LoadedStore) -> dict[str, list[tuple[str, bool]]]:
    """benchmark id -> the (concept, auto) keys its memory was filed under."""
    ids = list(loaded.benchmark_ids)
    keys: dict[str, list[tuple[str, bool]]] = {}
    for namespace in sorted(set(loaded.namespaces)):
        for start in range(0, len(ids), 1000):
            chunk = {"ids": ids[start : start + 1000], "namespace": namespace}
            for memory in running.memory("get_memories", chunk)["memories"]:
                filed = sorted((k["concept"], k["auto"]) for k in memory["keys"])
                for benchmark_id in loaded.benchmark_ids[memory["id"]]:
                    keys[benchmark_id] = filed
    return keys


def loaded_twice(path: Path, mode: KeyMode) -> tuple[dict[str, Any], dict[str, Any]]:
    benchmark = load_benchmark(path)
    stores = []
    for _ in range(2):
        with tempfile.TemporaryDirectory(prefix="km-") as home, full_stack(Path(home)) as running:
            loaded = load(running.client, benchmark, mode, Progress(None))
            stores.append(store_keys(running, loaded))
    return stores[0], stores[1]


def test_two_loads_of_one_file_file_every_memory_under_the_same_auto_keys() -> None:
    first, second = loaded_twice(FIXTURES / "eval_tiny.json", "auto")
    assert first == second
    assert all(any(auto for _, auto in keys) for keys in first.values())


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "locomo.dev.json").exists(), reason="needs ../shared/data")
@pytest.mark.parametrize(
    "name,mode", [("locomo.dev.json", "auto"), ("locomo_agentkeys.dev.json", "provided")]
)
def test_two_loads_of_a_dev_file_give_the_same_store(name: str, mode: KeyMode) -> None:
    first, second = loaded_twice(DATA / name, mode)
    assert len(first) == len(load_benchmark(DATA / name).memories)
    assert first == second


def test_correct_without_keys_reuses_the_keys_that_fit_and_says_which_it_dropped(
    deployed: FullStack,
) -> None:
    """The fact changed from strawberries to a peanut allergy: the strawberry keys (named by
    the old text, or close to it and far from the new one) go; the broad ones stay."""
    namespace = "correct"
    saved = deployed.memory(
        "remember",
        {
            "content": "The user loves strawberries",
            "keys": ["strawberry", "딸기", "food", "user taste"],
            "namespace": namespace,
        },
    )["saved"]
    corrected = deployed.memory(
        "correct",
        {
            "memory_id": saved,
            "content": "The user is allergic to peanuts, so no peanut snacks",
            "namespace": namespace,
        },
    )
    assert {"strawberry", "딸기"} <= set(corrected["dropped_keys"])
    assert "food" in corrected["inherited_keys"]
    kept = set(keys_of(deployed, corrected["new_id"], namespace))
    assert kept == set(corrected["inherited_keys"]) and not kept & {"strawberry", "딸기"}
    extended = deployed.memory(
        "correct",
        {
            "memory_id": corrected["new_id"],
            "content": "The user is allergic to peanuts and to shellfish",
            "namespace": namespace,
        },
    )
    assert extended["dropped_keys"] == []  # nothing moved away from the keys it kept


def test_a_correct_whose_keys_are_all_too_short_inherits_instead_of_failing(
    deployed: FullStack,
) -> None:
    saved = deployed.memory(
        "remember",
        {"content": "The team stand-up is at 9:30", "keys": ["stand-up", "meeting", "team"]},
    )["saved"]
    corrected = deployed.memory(
        "correct",
        {"memory_id": saved, "content": "The team stand-up moved to 10:00", "keys": ["a", "b"]},
    )
    assert sorted(corrected["inherited_keys"]) == ["meeting", "stand-up", "team"]
    assert "too short" in corrected["note"]


def test_remember_hints_split_phrase_keys_and_ask_for_another_language(
    deployed: FullStack,
) -> None:
    namespace = "hints"
    deployed.memory(
        "remember",
        {"content": "사용자는 부산에 산다", "keys": ["부산", "거주지"], "namespace": namespace},
    )
    english = deployed.memory(
        "remember",
        {
            "content": "The user works at a coffee roastery near the harbour",
            "keys": ["coffee roastery job", "harbour"],
            "namespace": namespace,
        },
    )
    hints = english["hints"]
    assert hints["phrase_keys"] == [
        {"your_key": "coffee roastery job", "split_into": ["coffee", "roastery", "job"]}
    ]
    assert hints["single_language"]["script"] == "latin"
    assert hints["single_language"]["store_scripts"] == ["hangul", "latin"]
    mixed = deployed.memory(
        "remember",
        {
            "content": "The user cycles to work along the beach",
            "keys": ["cycling", "자전거", "commute"],
            "namespace": namespace,
        },
    )
    assert "hints" not in mixed or "single_language" not in mixed["hints"]


@pytest.mark.parametrize(
    "query,matched_before",
    [
        ("사는곳", True),  # near 거주지 (cosine 0.63 on the offline model): a weak match
        ("내가 사는 도시", False),  # farther (0.34): no match, 거주지 among the nearest keys
    ],
)
def test_a_confirmed_near_miss_becomes_an_alias_that_recall_then_finds(
    deployed: FullStack, query: str, matched_before: bool
) -> None:
    namespace = f"nearmiss-{matched_before}"
    saved = deployed.memory(
        "remember",
        {
            "content": "The user lives in Busan, near Haeundae beach",
            "keys": ["거주지", "Busan", "Haeundae"],
            "namespace": namespace,
        },
    )["saved"]
    home = next(k for k in keys_of(deployed, saved, namespace).values() if k["concept"] == "거주지")
    for _ in range(3):
        recalled = deployed.memory("recall", {"query": query, "namespace": namespace})
        assert (recalled["status"] == "found") is matched_before
        near = recalled["keys"] or recalled["nearest_keys"]
        assert home["key_id"] in [k["key_id"] for k in near]
        deployed.memory(
            "read_memory",
            {"memory_id": saved, "via_key_id": home["key_id"], "namespace": namespace},
        )
        deployed.memory(
            "confirm_memory", {"memory_id": saved, "evidence": "user", "namespace": namespace}
        )
    recalled = deployed.memory("recall", {"query": query, "namespace": namespace})
    assert recalled["keys"][0]["key_id"] == home["key_id"]
    assert recalled["keys"][0]["match_type"] == "alias"
    assert [m["id"] for m in recalled["memories"]] == [saved]
