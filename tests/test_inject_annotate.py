"""Inject annotates its ranked top in one round after the search: the lexicon's coverage of what
the prompt asks, and subjects only where the prompt names a person (the one case its gate reads
them). What it judges, and so shows, must be what annotating the ranked top gives."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from keymem.services.memory.inject import (
    CANDIDATES,
    Gate,
    Inject,
    Observation,
    judge,
    named_entities,
    subject_of,
    without_entities,
)
from keymem.services.memory.search import (
    GATED_FUSION,
    Search,
    SearchRequest,
    rerank_segments,
)
from tests.full_stack import FullStack, full_stack

PEOPLE = ("Ann", "Bob", "Cleo", "Dara")
TOPICS = (
    "went hiking in the mountains with the climbing club",
    "baked sourdough bread for the neighbours",
    "fixed the bicycle brakes before the race",
    "read a novel about sailing around the cape",
    "planted tomatoes and basil in the garden",
    "learned the guitar chords of a folk song",
    "painted the kitchen a pale green colour",
    "adopted a rescue dog from the shelter",
    "ran the charity race for the hospital",
)
PROMPTS = (
    "What did Ann bake for the neighbours?",
    "Which race did Bob run for the hospital?",
    "Tell me about the garden Cleo planted",
    "what did Dara learn on the guitar",
    "who went hiking with the climbing club and read about sailing?",
    "Did Ann or Cleo adopt a dog?",
    "who baked sourdough bread and fixed bicycle brakes?",
)


@pytest.fixture(scope="module")
def team() -> Iterator[FullStack]:
    with tempfile.TemporaryDirectory(prefix="km-") as home, full_stack(Path(home)) as running:
        for n, person in enumerate(PEOPLE):
            for topic in TOPICS[n % 2 :: 1 + n % 2]:
                words = topic.split()
                running.memory(
                    "remember",
                    {
                        "content": f"{person} {topic}",
                        "keys": [person, words[-1], words[1]],
                        "key_types": {person: "name"},
                        "namespace": "team",
                    },
                )
        running.search("sourdough bread", "team")  # waits until the lexicon has every write
        yield running


def annotated_afterwards(running: FullStack, prompt: str) -> tuple[Observation, int]:
    """The search's ranked top, then its coverage and (where the prompt names a person) its
    subjects in a round of their own, and the size of the pool it was ranked from."""
    search = Search(running.client, GATED_FUSION)
    request = {"query": prompt, "namespace": "team", "top_k": CANDIDATES, "hops": 2}
    (found,) = search.search_all([SearchRequest.parse(request)])
    full = {**request, "top_k": 50}
    pool = len(search.search_all([SearchRequest.parse(full)])[0]["memories"])
    seen = Observation("team", found["memories"], found["keys"], degraded=found["degraded"])
    ids = [c["memory_id"] for c in seen.candidates]
    content = {c["memory_id"]: c["content"] for c in seen.candidates}
    if any(entity.person for entity in named_entities(prompt, seen.keys)):
        body = {"memory_ids": ids, "namespace": "team"}
        keys = running.client.call("graph", "memory_keys", body)
        seen.subjects = {m: subject_of(content[m], k) for m, k in keys["memories"].items()}
    asked = without_entities(prompt, named_entities(prompt, seen.keys))
    if re.search(r"\w", asked):
        seen.coverage = {}
        for segment in rerank_segments(asked):
            body = {"query": segment, "namespace": "team", "ids": ids}
            shares = running.client.call("lexicon", "coverage", body)["coverage"]
            for memory_id, share in zip(ids, shares, strict=True):
                if share is not None:
                    seen.coverage[memory_id] = max(share, seen.coverage.get(memory_id, 0.0))
    return seen, pool


def test_inject_judges_what_annotating_the_ranked_top_afterwards_gave(team: FullStack) -> None:
    inject = Inject(Search(team.client, GATED_FUSION))
    pools, subjects = [], []
    for prompt in PROMPTS:
        expected, pool = annotated_afterwards(team, prompt)
        (seen,) = inject.observe(prompt, ["team"])
        assert seen == expected, prompt
        assert judge(prompt, [seen], Gate(), 2) == judge(prompt, [expected], Gate(), 2)
        pools.append(pool)
        subjects.append(seen.subjects is not None)
    assert max(pools) > CANDIDATES  # the top was chosen from more than it holds
    assert any(subjects) and not all(subjects)  # prompts naming a person, and one naming none


def test_without_the_lexicon_inject_still_answers_and_says_so() -> None:
    """With the lexicon gone inject still answers, the coverage gates stand aside, and the reply
    names the coverage call as degraded."""
    with tempfile.TemporaryDirectory(prefix="km-") as home, full_stack(Path(home)) as running:
        running.memory(
            "remember",
            {
                "content": "Ann baked sourdough bread for the neighbours",
                "keys": ["Ann", "sourdough bread"],
                "key_types": {"Ann": "name"},
            },
        )
        running.search("sourdough bread")  # the lexicon has the write
        running.workers["lexicon"].stop()
        reply = running.memory("inject", {"prompt": "What did Ann bake for the neighbours?"})
    assert [m["content"] for m in reply["memories"]] == [
        "Ann baked sourdough bread for the neighbours"
    ]
    assert reply["degraded"]["lexicon"].startswith("coverage: ")  # the annotating call
