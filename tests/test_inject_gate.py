"""Inject's admission rules: one at a time on candidates shaped as hybrid search returns them,
then end to end through every real service (paraphrase, premise, namespaces, bad bodies).

Each gate's threshold is pinned on hand-made candidates where a store could not isolate it: a
candidate no key reaches but whose words cover the prompt, a paraphrase sharing no words, a
memory in another script. The in-process stack then checks what a user sees.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keymem.protocol.errors import BadRequest
from keymem.services.memory.inject import (
    Entity,
    Gate,
    Inject,
    Observation,
    admit,
    judge,
    structured_tokens,
    without_entities,
)
from keymem.services.memory.search import Search
from tests.full_stack import FullStack, full_stack

PROMPT = "when is the acme quarterly invoice due"


def candidate(
    memory_id: str,
    *,
    relevance: float = 0.5,
    connected: bool = True,
    content: str = "the acme quarterly invoice is due on the fifteenth",
    keys: tuple[str, ...] = ("k-invoice",),
) -> dict[str, Any]:
    return {
        "memory_id": memory_id,
        "content": content,
        "rerank_score": relevance,
        "rerank_kind": "embedding_cosine",
        "matched_keys": list(keys) if connected else [],
        "components": {"key_rank": 1 if connected else None, "literal": False, "hop": 0},
    }


def ids(admitted: list[dict[str, Any]]) -> list[str]:
    return [c["memory_id"] for c in admitted]


def test_coverage_floor_rejects_a_memory_that_shares_too_little_of_the_prompt() -> None:
    pool = [candidate("full"), candidate("thin")]
    kept, rejected = admit(PROMPT, pool, [], {"full": 0.9, "thin": 0.1}, Gate())
    assert ids(kept) == ["full"] and rejected["low_coverage"] == 1


def test_a_strong_paraphrase_needs_no_shared_words() -> None:
    pool = [candidate("paraphrase", relevance=0.7)]
    kept, _ = admit(PROMPT, pool, [], {"paraphrase": 0.0}, Gate())
    assert ids(kept) == ["paraphrase"]
    kept, _ = admit(PROMPT, pool, [], {"paraphrase": 0.0}, Gate(strong_relevance=0.8))
    assert kept == []


def test_words_alone_admit_what_no_key_reaches_and_the_reranker_scores_low() -> None:
    pool = [candidate("session", relevance=0.1, connected=False)]
    kept, _ = admit(PROMPT, pool, [], {"session": 0.8}, Gate())
    assert ids(kept) == ["session"]
    kept, rejected = admit(PROMPT, pool, [], {"session": 0.3}, Gate())
    assert kept == [] and rejected["bm25_only"] == 1


def test_without_the_lexicon_the_coverage_gates_stand_aside() -> None:
    pool = [candidate("connected"), candidate("loose", connected=False)]
    kept, rejected = admit(PROMPT, pool, [], None, Gate())
    assert ids(kept) == ["connected"] and rejected["bm25_only"] == 1


def test_the_memory_holding_what_is_asked_is_shown_before_a_slightly_stronger_match() -> None:
    top = {**candidate("top"), "score": 2.0}
    holder = {**candidate("holder"), "score": 1.6}
    seen = Observation("default", [top, holder], [], {"top": 0.35, "holder": 1.0})
    chosen, _ = judge(PROMPT, [seen], Gate(), top_k=1)
    assert ids(chosen) == ["holder"]
    # what it holds is one more unit of evidence, not a veto: a much stronger match leads
    top["score"] = 3.0
    chosen, _ = judge(PROMPT, [seen], Gate(), top_k=1)
    assert ids(chosen) == ["top"]


def test_the_subject_decides_only_when_the_graph_could_say() -> None:
    prompt = "Is Oscar Melanie's pet?"
    keys = [
        {"key_id": "k-oscar", "concept": "Oscar", "key_type": "name"},
        {"key_id": "k-melanie", "concept": "Melanie", "key_type": "name"},
    ]
    pet = candidate("pet", content="Caroline has a guinea pig named Oscar", keys=("k-oscar",))
    kept, rejected = admit(prompt, [pet], keys, {"pet": 1.0}, Gate(), {"pet": "k-caroline"})
    assert kept == [] and rejected["other_entity"] == 1
    kept, _ = admit(prompt, [pet], keys, {"pet": 1.0}, Gate(), None)
    assert ids(kept) == ["pet"]


def test_a_named_entity_must_be_whom_the_memory_is_about() -> None:
    keys = [{"key_id": "k-dana", "concept": "Dana", "aliases": [], "key_type": "name"}]
    prompt = "what did Dana say about the acme invoice"
    pool = [
        candidate("dana", content="Dana said the acme invoice is late"),
        candidate("filed", content="the acme invoice is late", keys=("k-dana",)),
        candidate("lee", content="Lee said the acme invoice is late"),
    ]
    coverage = {"dana": 0.9, "filed": 0.6, "lee": 0.6}
    kept, rejected = admit(prompt, pool, keys, coverage, Gate())
    assert ids(kept) == ["dana", "filed"] and rejected["other_entity"] == 1
    # Lee's memory covers the prompt better than any about Dana: the premise is elsewhere
    coverage["lee"] = 0.95
    kept, rejected = admit(prompt, pool, keys, coverage, Gate())
    assert kept == [] and rejected["premise_elsewhere"] == 2
    kept, _ = admit(prompt, pool, keys, coverage, Gate(premise=False))
    assert ids(kept) == ["dana", "filed"]


def test_another_entitys_memory_holding_as_much_leaves_the_premise_unsupported() -> None:
    keys = [{"key_id": "k-jon", "concept": "Jon", "aliases": [], "key_type": "name"}]
    prompt = "What is Jon's favorite style of painting?"
    pool = [
        candidate("jon", content="Jon's favorite dance style is contemporary", keys=("k-jon",)),
        candidate("gina", content="Gina's favorite dance style is contemporary", keys=()),
    ]
    # both hold "favorite" and "style", neither "painting": the words cannot say whose it is
    coverage = {"jon": 0.65, "gina": 0.65}
    kept, rejected = admit(prompt, pool, keys, coverage, Gate())
    assert kept == [] and rejected["premise_elsewhere"] == 1
    kept, _ = admit(prompt, pool, keys, coverage, Gate(premise_ties=False))
    assert ids(kept) == ["jon"]
    # a memory of the named person that holds more of what is asked stands
    coverage["jon"] = 0.9
    kept, _ = admit(prompt, pool, keys, coverage, Gate())
    assert ids(kept) == ["jon"]
    # one holding every asked word answers the question as asked, whoever else's does too
    kept, _ = admit(prompt, pool, keys, {"jon": 1.0, "gina": 1.0}, Gate())
    assert ids(kept) == ["jon"]
    # nothing held on either side is no tie: the coverage floor, not the premise, decides
    kept, rejected = admit(prompt, pool, keys, {"jon": 0.0, "gina": 0.0}, Gate())
    assert kept == [] and rejected["premise_elsewhere"] == 0


def test_a_place_the_prompt_names_does_not_stand_in_for_the_person_it_asks_about() -> None:
    keys = [
        {"key_id": "k-joanna", "concept": "Joanna", "aliases": [], "key_type": "name"},
        {"key_id": "k-tampa", "concept": "Tampa", "aliases": [], "key_type": "proper_noun"},
    ]
    prompt = "What did Joanna take to the beach in Tampa?"
    nate = candidate("nate", content="Nate took his turtles to the beach in Tampa")
    kept, rejected = admit(prompt, [nate], keys, {"nate": 0.8}, Gate())
    assert kept == [] and rejected["other_entity"] == 1
    kept, _ = admit(prompt, [nate], keys, {"nate": 0.8}, Gate(persons=False))
    assert ids(kept) == ["nate"]


def test_a_thing_only_another_persons_memory_holds_leaves_the_premise_unsupported() -> None:
    keys = [
        {"key_id": "k-tim", "concept": "Tim", "aliases": [], "key_type": "name"},
        {"key_id": "k-john", "concept": "John", "aliases": [], "key_type": "name"},
        {"key_id": "k-aragorn", "concept": "Aragorn", "aliases": [], "key_type": "proper_noun"},
    ]
    prompt = "Why does Tim like Aragorn?"
    tim = candidate("tim", content="Tim likes fantasy books", keys=("k-tim",))
    john = candidate("john", content="John likes Aragorn for his growth", keys=("k-aragorn",))
    pool, coverage = [tim, john], {"tim": 1.0, "john": 1.0}
    subjects: dict[str, str | None] = {"john": "k-john"}
    # Tim's memory holds every asked word, but only John's holds Aragorn: it is John's fact
    kept, rejected = admit(prompt, pool, keys, coverage, Gate(), subjects)
    assert kept == [] and rejected["premise_elsewhere"] == 1
    kept, _ = admit(prompt, pool, keys, coverage, Gate(premise_things=False), subjects)
    assert ids(kept) == ["tim"]
    # a memory of Tim's that holds Aragorn answers it
    tim["content"] = "Tim likes Aragorn from the books"
    kept, _ = admit(prompt, pool, keys, coverage, Gate(), subjects)
    assert ids(kept) == ["tim"]


def test_a_name_only_another_persons_memory_holds_leaves_the_premise_unsupported() -> None:
    keys = [
        {"key_id": "k-oscar", "concept": "Oscar", "aliases": [], "key_type": "name"},
        {"key_id": "k-melanie", "concept": "Melanie", "aliases": [], "key_type": "name"},
    ]
    prompt = "Is Oscar Melanie's pet?"
    oscar = candidate("oscar", content="Caroline has a guinea pig named Oscar", keys=("k-oscar",))
    bailey = candidate("bailey", content="Melanie has a pet cat named Bailey", keys=("k-melanie",))
    pool, coverage = [oscar, bailey], {"oscar": 1.0, "bailey": 1.0}
    subjects: dict[str, str | None] = {"oscar": "k-caroline", "bailey": "k-melanie"}
    # Melanie's memory holds every asked word, but only Caroline's holds Oscar
    kept, rejected = admit(prompt, pool, keys, coverage, Gate(), subjects)
    assert kept == [] and rejected["premise_elsewhere"] == 1
    kept, _ = admit(prompt, pool, keys, coverage, Gate(premise_things=False), subjects)
    assert ids(kept) == ["bailey"]


@pytest.mark.parametrize("key_type", ["name", "proper_noun"])  # agent keys, auto-keys
def test_the_asked_entitys_thing_given_to_another_owner_is_the_others(key_type: str) -> None:
    keys = [{"key_id": "k-tim", "concept": "Tim", "aliases": [], "key_type": key_type}]
    prompt = "In which area has Tim's team seen the most growth?"
    asks = candidate("asks", content="Tim asks about areas of growth in John's team", keys=())
    kept, rejected = admit(prompt, [asks], keys, {"asks": 0.9}, Gate(), {"asks": "k-tim"})
    assert kept == [] and rejected["other_entity"] == 1
    kept, _ = admit(prompt, [asks], keys, {"asks": 0.9}, Gate(owners=False), {"asks": "k-tim"})
    assert ids(kept) == ["asks"]
    # Tim's own team, or the thing given to no one, is his
    for content in ("Tim's team grew in communication", "Tim asks John about the team"):
        asks["content"] = content
        kept, _ = admit(prompt, [asks], keys, {"asks": 0.9}, Gate(), {"asks": "k-tim"})
        assert ids(kept) == ["asks"]


def test_what_a_prompt_asks_leaves_the_entities_it_names_out() -> None:
    donggyun = Entity("k-d", ("Donggyun", "동균"), person=True)
    assert without_entities("what does Donggyun drink at night?", [donggyun]).split() == [
        "what",
        "does",
        "drink",
        "at",
        "night?",
    ]
    assert without_entities("동균은 밤에 뭘 마셔?", [donggyun]).strip() == "은 밤에 뭘 마셔?"
    assert without_entities("Donggyunite drinks", [donggyun]) == "Donggyunite drinks"


def test_a_version_keeps_its_number_with_or_without_a_v() -> None:
    assert structured_tokens("what changed in v0.6.2 and 3.11.2, see #12 and a1b2c3d") == [
        "0.6.2",
        "3.11.2",
        "#12",
        "a1b2c3d",
    ]
    pool = [
        candidate("old", content="keymem v0.6.1 released with the new hook"),
        candidate("new", content="keymem v0.6.2 fixed the hook"),
    ]
    kept, rejected = admit("what changed in v0.6.2?", pool, [], None, Gate())
    assert ids(kept) == ["new"] and rejected["missing_token"] == 1


def test_a_memory_in_another_script_is_admitted_through_meaning_at_its_own_floor() -> None:
    keys = [{"key_id": "k-vote", "concept": "선거", "match_type": "phrase", "key_type": "concept"}]
    prompt = "At what age can a citizen vote?"
    statute = candidate("statute", relevance=0.4, content="선거권은 18세 이상의 국민에게 있다")
    statute["matched_keys"] = ["k-vote"]
    near = candidate("near", relevance=0.4, connected=False, content="국민은 투표할 권리를 가진다")
    near["components"]["near_key"] = 0.31  # a member of a key near the prompt's vector
    dense = candidate("dense", relevance=0.4, connected=False, content="만 18세 이상 투표")
    dense["components"]["dense_rank"] = 7  # its own text vector near the prompt's
    pool = [statute, near, dense]
    coverage = {"statute": 0.0, "near": 0.0, "dense": 0.0}
    kept, _ = admit(prompt, pool, keys, coverage, Gate())
    assert ids(kept) == ["statute", "near", "dense"]
    kept, rejected = admit(prompt, pool, keys, coverage, Gate(cross_relevance=0.5))
    assert kept == [] and rejected["below_floor"] == 3
    kept, rejected = admit(prompt, pool, keys, coverage, Gate(cross_script=False))
    assert kept == [] and rejected == {**rejected, "low_coverage": 1, "bm25_only": 2}
    # with the reranker degraded there is no relevance, and across scripts nothing else
    for memory in pool:
        memory["rerank_score"] = None
    kept, rejected = admit(prompt, pool, keys, coverage, Gate())
    assert kept == [] and rejected["bm25_only"] == 2
    # the same script: shared words are the evidence, and there are none
    same = candidate("same", relevance=0.4, content="The council meets on Mondays")
    kept, _ = admit(prompt, [same], keys, {"same": 0.0}, Gate())
    assert kept == []


# -- end to end ----------------------------------------------------------------------------
PEOPLE = {
    "race": ("Melanie ran a charity race for mental health last Saturday", ["Melanie"]),
    "guitar": ("Caroline plays the guitar to express her emotions", ["Caroline"]),
    "adoption": ("Caroline is researching adoption agencies", ["Caroline"]),
    "jiwoo": ("The user's name is Jiwoo and they live in Busan", ["Jiwoo"]),
    "coffee": ("Donggyun drinks a cup of black coffee every morning", ["Donggyun"]),
    "oscar": ("Caroline has a guinea pig named Oscar", ["Caroline", "Oscar"]),
    "bailey": ("Melanie has a cat named Bailey", ["Melanie"]),
    "teacher": ("Melanie asked about Caroline's guitar teacher", ["Melanie", "Caroline"]),
}
TOPICS = {"race": "charity race", "guitar": "guitar", "adoption": "adoption",
          "jiwoo": "home", "coffee": "coffee", "oscar": "pet", "bailey": "pet",
          "teacher": "guitar teacher"}  # fmt: skip
# Korean statutes: no English prompt shares a word with them.
STATUTES = {
    "vote": ("선거권은 만 18세 이상의 국민에게 있다", "선거권"),
    "term": ("국회의원의 임기는 4년으로 한다", "국회의원"),
    "tax": ("모든 국민은 법률이 정하는 바에 의하여 납세의 의무를 진다", "납세"),
}
# A prompt that says a stored fact in other words, and the memory it must surface.
PARAPHRASES = [
    ("Can you remind me where I live?", "jiwoo"),
    ("What does Donggyun usually drink in the morning?", "coffee"),
    ("Which instrument does Caroline play to express her feelings?", "guitar"),
]


@pytest.fixture(scope="module")
def people() -> Iterator[FullStack]:
    with tempfile.TemporaryDirectory(prefix="km-") as home, full_stack(Path(home)) as running:
        for name, (content, persons) in PEOPLE.items():
            running.ids[name] = running.memory(
                "remember",
                {
                    "content": content,
                    "keys": [*persons, TOPICS[name]],
                    "key_types": dict.fromkeys(persons, "name"),
                    "namespace": "people",
                },
            )["saved"]
        running.ids["shop"] = running.remember(
            "The shop project deploys with a blue-green switch on Fridays",
            ["deployment", "blue-green"],
            "shop",
        )
        for name, (content, key) in STATUTES.items():
            running.ids[name] = running.remember(content, [key], "law")
        running.search("charity race", "people")  # waits until the lexicon has every write
        yield running


def injected(running: FullStack, prompt: str, *namespaces: str) -> dict[str, Any]:
    body = {"prompt": prompt, "namespaces": list(namespaces or ("people",))}
    reply: dict[str, Any] = running.memory("inject", body)
    return reply


def shown(reply: dict[str, Any]) -> list[str]:
    return [m["id"] for m in reply["memories"]]


@pytest.mark.parametrize("prompt,memory", PARAPHRASES)
def test_the_hook_surfaces_what_recall_finds_for_a_paraphrase(
    people: FullStack, prompt: str, memory: str
) -> None:
    found = people.memory("recall", {"query": prompt, "namespace": "people"})
    assert found["status"] == "found"
    assert people.ids[memory] in shown(injected(people, prompt))


def test_a_prompt_in_another_script_surfaces_the_memory_it_means(people: FullStack) -> None:
    prompt = "At what age do citizens get the right to vote?"
    assert shown(injected(people, prompt, "law"))[:1] == [people.ids["vote"]]
    # the cross-script path does it: without it no shared word can speak for the statute
    wordy = Inject(Search(people.client), Gate(cross_script=False))
    assert shown(wordy.inject({"prompt": prompt, "namespaces": ["law"]})) == []
    # meaning is the only evidence across scripts, and an unrelated prompt has none
    assert shown(injected(people, "why does my rust build fail to link openssl?", "law")) == []


def test_another_inflection_of_the_asked_words_counts_as_holding_them(people: FullStack) -> None:
    # "researched adopting" against "is researching adoption": the same two words, stemmed
    prompt = "Has Caroline researched adopting?"
    (seen,) = Inject(Search(people.client)).observe(prompt, ["people"])
    assert seen.coverage is not None
    assert seen.coverage[people.ids["adoption"]] == pytest.approx(1.0)
    assert people.ids["adoption"] in shown(injected(people, prompt))


def test_inject_stays_silent_when_the_prompt_pins_anothers_fact_on_someone(
    people: FullStack,
) -> None:
    ids = people.ids
    right = injected(people, "What did Melanie run for mental health?")
    assert shown(right)[:1] == [ids["race"]]
    # the race was Melanie's: nothing about Caroline answers this, and Melanie's race is not
    # about Caroline
    wrong = injected(people, "What did Caroline realize after her charity race?")
    assert wrong["memories"] == [] and wrong["rejected"]["other_entity"] >= 1
    # the gates do the work: the same search with them switched off surfaces the race
    ungated = Inject(
        Search(people.client),
        Gate(entities=False, premise=False, min_coverage=0.0),
    )
    reply = ungated.inject({"prompt": "What did Caroline realize after her charity race?",
                            "namespaces": ["people"]})  # fmt: skip
    assert ids["race"] in shown(reply)


def test_a_memory_is_about_the_person_its_text_names_first(people: FullStack) -> None:
    oscar = people.ids["oscar"]
    assert oscar in shown(injected(people, "What pet does Caroline have?"))
    assert people.ids["bailey"] in shown(injected(people, "What pet does Melanie have?"))
    # Oscar is Caroline's: filed under Oscar, but not an answer about Melanie's pet; and Melanie's
    # own pet is not either, since only Caroline's memory holds Oscar
    wrong = injected(people, "Is Oscar Melanie's pet?")
    assert wrong["memories"] == [] and wrong["rejected"]["other_entity"] >= 1
    without = Inject(Search(people.client), Gate(subjects=False))
    reply = without.inject({"prompt": "Is Oscar Melanie's pet?", "namespaces": ["people"]})
    assert oscar in shown(reply)


def test_a_memory_giving_the_asked_thing_to_another_owner_is_not_shown(people: FullStack) -> None:
    teacher = people.ids["teacher"]
    # Melanie's memory, but the teacher it names is Caroline's
    assert teacher not in shown(injected(people, "Who is Melanie's guitar teacher?"))
    without = Inject(Search(people.client), Gate(owners=False))
    reply = without.inject({"prompt": "Who is Melanie's guitar teacher?", "namespaces": ["people"]})
    assert teacher in shown(reply)


def test_an_attribute_the_memory_lacks_is_not_answered_by_the_name_alone(
    people: FullStack,
) -> None:
    reply = injected(people, "What does Donggyun eat for dinner at night?")
    assert people.ids["coffee"] not in shown(reply)
    assert reply["rejected"]["low_coverage"] >= 1


def test_two_namespaces_are_searched_with_one_analysis_of_the_prompt(people: FullStack) -> None:
    embedder = people.workers["embedder"].worker.stats
    before = embedder.requests
    reply = injected(people, "how does the shop project handle deployment?", "people", "shop")
    assert people.ids["shop"] in shown(reply)
    # one query vector and one batch of the prompt's phrases, whatever the namespace count
    assert embedder.requests - before == 2


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": "what snack should I buy?", "gate": {"min_coverage": 0.0}},
        {"prompt": "what snack should I buy?", "namespaces": []},
        {"prompt": ""},
        {"prompt": "what snack?", "top_k": 0},
        ["not", "a", "map"],
    ],
)
def test_inject_refuses_a_bad_body_and_takes_no_gate_over_the_wire(
    people: FullStack, body: Any
) -> None:
    with pytest.raises(BadRequest):
        people.memory("inject", body)
    assert shown(injected(people, "What did Melanie run for mental health?"))
