"""Recall's graph half on agent-written keys (services/graph/hybrid.py): evidence through a key
is divided by how many memories the key is on, so a person's name on every memory of their
conversation passes on next to nothing. Real vectors (tests/vectors.py), a real graph file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keymem.services.graph import GraphService
from tests.graph_helpers import open_graph
from tests.vectors import remember_body, vector

NAME = {"Melanie": "name", "Caroline": "name"}
PAINTS = "Melanie paints lake sunrises on weekends."
CAMPING = "Melanie took her kids camping in the mountains."
HIKING = "Caroline goes hiking with her friends."


@pytest.fixture
def graph(tmp_path: Path) -> Iterator[GraphService]:
    service = open_graph(tmp_path)
    # Two people of one conversation, each on every memory of theirs, sharing topic keys.
    for person, content, keys in [
        ("Melanie", PAINTS, ["hobby", "lake sunrise painting"]),
        ("Melanie", CAMPING, ["family", "camping"]),
        ("Caroline", HIKING, ["hobby", "hiking"]),
        ("Caroline", "Caroline is researching adoption agencies.", ["family", "adoption"]),
    ]:
        service.remember(remember_body(content, [person, *keys], key_types=NAME))
    yield service
    service.close()


def candidates(graph: GraphService, question: str, hops: int) -> dict[str, dict[str, Any]]:
    body = {"vector": vector(question), "text": question, "hops": hops}
    return {c["content"]: c["components"] for c in graph.recall_candidates(body)["candidates"]}


def test_a_names_own_evidence_is_its_idf_halved(graph: GraphService) -> None:
    # only the name matches: IDF 1/n (n = 2 here; a LoCoMo speaker's name is on 100+
    # memories) x the entity factor 1/2
    found = candidates(graph, "Tell me about Melanie", hops=0)
    assert set(found) == {PAINTS, CAMPING}
    assert [c["key_path"] for c in found.values()] == pytest.approx([0.25, 0.25], abs=0.01)


def test_a_hop_passes_on_its_keys_idf_so_a_name_passes_on_least(graph: GraphService) -> None:
    # the seed is the painting memory (its own key is named); one step passes on 0.3 x IDF:
    # through "hobby" (2 memories) 0.15 to Caroline's hiking, through "Melanie" (2 memories,
    # a name) 0.075 to Melanie's camping
    found = candidates(graph, "the lake sunrise painting", hops=1)
    assert found[PAINTS]["hop"] == 0 and found[PAINTS]["key_path"] == pytest.approx(1.0, abs=0.02)
    assert found[HIKING]["hop_share"] == pytest.approx(0.3 * 0.5, rel=0.02)
    assert found[CAMPING]["hop_share"] == pytest.approx(0.3 * 0.25, rel=0.02)


def test_a_hop_names_the_memory_it_stepped_from(graph: GraphService) -> None:
    # the router lifts a hop at most to just below its lender, so the graph says which it was
    found = {
        c["content"]: (c["memory_id"], c["components"])
        for c in graph.recall_candidates(
            {"vector": vector("lake sunrise painting"), "text": "the lake sunrise painting"}
        )["candidates"]
    }
    seed_id, seed = found[PAINTS]
    assert seed["hop"] == 0 and seed["hop_from"] is None
    assert found[HIKING][1]["hop_from"] == seed_id  # one step, through "hobby"
    assert found[CAMPING][1]["hop_from"] == seed_id  # one step, through "Melanie"


def test_a_candidate_carries_its_writers_keys_not_its_auto_keys(graph: GraphService) -> None:
    # what the memory's writer said it is about, for the reranker's second reading
    found = {
        c["content"]: c["about"]
        for c in graph.recall_candidates(
            {"vector": vector("lake sunrise painting"), "text": "the lake sunrise painting"}
        )["candidates"]
    }
    assert found[PAINTS] == "Melanie; hobby; lake sunrise painting"
    # fewer than three keys of its writer: the graph links the keys its text names as auto-keys
    again = "Melanie went camping again."
    graph.remember(remember_body(again, ["weekend"]))
    linked = {c["content"]: c for c in graph.recall_candidates({"text": again})["candidates"]}
    memory_id = linked[again]["memory_id"]
    links = graph.memory_keys({"memory_ids": [memory_id]})["memories"][memory_id]
    assert {k["concept"] for k in links if k["auto"]} >= {"Melanie", "camping"}
    assert linked[again]["about"] == "weekend"


def test_a_memory_is_about_the_person_its_text_names_first(graph: GraphService) -> None:
    # filed under both people, told from Caroline's side: Caroline's; a memory naming none of
    # its people has no subject
    both = "Caroline admires how Melanie paints with her kids."
    calm = "The lake was calm at sunrise."
    graph.remember(remember_body(both, ["Caroline", "Melanie", "painting"], key_types=NAME))
    graph.remember(remember_body(calm, ["Melanie", "lake"], key_types=NAME))
    body = {"vector": vector("Melanie paints"), "text": "Melanie paints", "hops": 0}
    reply = graph.recall_candidates(body)
    melanie = next(k["key_id"] for k in reply["keys"] if k["concept"] == "Melanie")
    found = {c["content"]: c["subject"] for c in reply["candidates"]}
    assert found[PAINTS] == found[CAMPING] == melanie
    assert found[both] is not None and found[both] != melanie
    assert found[calm] is None
