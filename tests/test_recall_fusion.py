"""The router's final fusion on hand-made pools: no services, every number checkable by hand."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keymem.protocol.errors import BadRequest, DeadlineExceeded, KeymemError
from keymem.protocol.limits import RERANK_MAX_PASSAGES
from keymem.services.memory.search import (
    GATED_FUSION,
    SCRIPTS,
    Fusion,
    Relevance,
    Search,
    SearchRequest,
    crosses_script,
    fuse_blend,
    min_max,
    select_evidence,
)


def candidate(
    name: str,
    *,
    key: float = 0.0,
    bm25: float = 0.0,
    hop: float = 0.0,
    hop_share: float = 0.0,
    factor: float = 1.0,
) -> dict[str, Any]:
    return {
        "memory_id": name,
        "score": 0.0,
        "components": {
            "key_path": key,
            "key_rank": 1 if key else None,
            "bm25_score": bm25,
            "bm25_rank": 1 if bm25 else None,
            "literal": False,
            "hop": 1 if hop else 0,
            "hop_score": hop,
            "hop_share": hop_share,
            "factor": factor,
        },
    }


def order(fused: list[dict[str, Any]]) -> list[str]:
    return [c["memory_id"] for c in fused]


class RecordingReranker:
    """Stands in for the router client's ``call_many`` to the reranker: records each call's
    passages and scores each passage with ``score``; a call holding a passage ``score`` answers
    with an error gets that error, as a call past its deadline does."""

    def __init__(self, score: Callable[[str], float | KeymemError]) -> None:
        self.score = score
        self.calls: list[list[str]] = []

    @property
    def passages(self) -> list[str]:
        return [p for call in self.calls for p in call]

    def call_many(self, calls: list[Any], timeout_ms: int) -> list[Any]:
        replies: list[Any] = []
        for _, _, body in calls:
            self.calls.append(body["passages"])
            scores = [self.score(p) for p in body["passages"]]
            error = next((s for s in scores if isinstance(s, KeymemError)), None)
            replies.append(error or {"scores": scores, "score_kind": "embedding_cosine"})
        return replies


def test_min_max_maps_the_pool_onto_unit_range_and_flat_pools_onto_zero() -> None:
    assert min_max([2.0, 4.0, 3.0]) == [0.0, 1.0, 0.5]
    assert min_max([0.3, 0.3]) == [0.0, 0.0]
    assert min_max([]) == []


def test_a_strong_bm25_margin_survives_a_reranker_that_mildly_disagrees() -> None:
    # RRF would tie these (each first in one list); the blend keeps BM25's wide margin.
    pool = [candidate("a", bm25=20.0), candidate("b", bm25=2.0), candidate("c", bm25=1.0)]
    fused = fuse_blend(pool, Relevance([0.40, 0.42, 0.10], "embedding_cosine"), Fusion())
    assert order(fused) == ["a", "b", "c"]
    assert fused[0]["score_kind"] == "blended_evidence"
    assert fused[0]["rerank_score"] == 0.40


def test_a_hub_keys_evidence_stays_small_whoever_else_is_in_the_pool() -> None:
    # A person's name is on 100 memories (IDF 1/100): the pool's only key path and only hop
    # come through it. On the pool's own scale they would count a whole unit each and put the
    # hub's memories first; on their own scale they add next to nothing.
    hub = candidate("hub", key=0.01, bm25=1.0, hop=0.0004, hop_share=0.003)
    answer = candidate("answer", bm25=1.4)
    other = candidate("other", bm25=1.0)
    relevance = Relevance([0.30, 0.50, 0.10], "embedding_cosine")
    assert order(fuse_blend([hub, answer, other], relevance, Fusion()))[0] == "answer"
    pooled = fuse_blend([hub, answer, other], relevance, Fusion(scale="pool"))
    assert order(pooled)[0] == "hub"


def test_one_specific_key_or_one_step_between_two_memories_is_a_whole_unit() -> None:
    # a named key on one memory (key path 1) and a hop through a key on two memories
    # (hop share 0.3 x 1/2) each count a whole unit: the floor the pool's best is taken over
    seed = candidate("seed", key=1.0, bm25=4.0)
    seed["components"]["fused"] = 0.03
    bridge = candidate("bridge", hop=0.0045, hop_share=0.15)
    pool = [seed, bridge, candidate("none")]
    scores = [(c["memory_id"], c["score"]) for c in fuse_blend(pool, None, Fusion())]
    assert scores == [("seed", 2.0), ("bridge", 1.0), ("none", 0.0)]
    # half that specific (a key on four memories): half a unit, not a whole one as min-max gives
    bridge["components"]["hop_share"] = 0.075
    assert fuse_blend(pool, None, Fusion())[1]["score"] == 0.5
    assert fuse_blend(pool, None, Fusion(scale="pool"))[1]["score"] == 1.0


def test_a_hop_lifts_what_it_reaches_to_just_below_the_memory_it_stepped_from() -> None:
    # The seed's neighbour through a key on two memories gets a whole hop unit the seed lacks;
    # added in full it would outrank the seed whose evidence it borrowed.
    seed = candidate("seed", key=1.0, bm25=4.0)
    neighbour = candidate("neighbour", key=1.0, bm25=3.0, hop=0.0045, hop_share=0.15)
    neighbour["components"]["hop_from"] = "seed"
    lifted = candidate("lifted", hop=0.0045, hop_share=0.15)
    lifted["components"]["hop_from"] = "seed"
    pool = [seed, neighbour, lifted, candidate("none", bm25=1.0)]
    over = fuse_blend(pool, None, Fusion(hops_below_lender=False))
    assert order(over) == ["neighbour", "seed", "lifted", "none"]
    fused = fuse_blend(pool, None, Fusion())
    assert order(fused) == ["seed", "neighbour", "lifted", "none"]
    scores = {c["memory_id"]: c["score"] for c in fused}
    assert scores["seed"] == 2.0 and scores["neighbour"] < 2.0
    # below its lender a hop still counts in full: the hop-only memory keeps its whole unit
    assert scores["lifted"] == 1.0 and scores["none"] == 0.25


def test_a_second_step_stays_below_the_first_step_it_came_through() -> None:
    # seed -> first (one step) -> second (two steps): each is settled after its lender, so the
    # chain keeps its order although the second step carries the larger hop share
    seed = candidate("seed", bm25=2.0)
    first = candidate("first", bm25=1.0, hop=0.001, hop_share=0.15)
    second = candidate("second", bm25=1.0, hop=0.001, hop_share=0.3)
    first["components"]["hop_from"] = "seed"
    second["components"].update(hop=2, hop_from="first")
    pool = [second, first, seed, candidate("none")]
    assert order(fuse_blend(pool, None, Fusion())) == ["seed", "first", "second", "none"]
    assert order(fuse_blend(pool, None, Fusion(hops_below_lender=False)))[0] == "second"


def test_a_hop_never_costs_what_it_reaches_its_own_evidence() -> None:
    # the reached memory's direct evidence beats its lender's: it keeps it, the hop adds nothing
    seed = candidate("seed", key=1.0)
    strong = candidate("strong", key=1.0, bm25=5.0, hop=0.0045, hop_share=0.15)
    strong["components"]["hop_from"] = "seed"
    fused = fuse_blend([seed, strong, candidate("none", bm25=1.0)], None, Fusion())
    assert [(c["memory_id"], c["score"]) for c in fused][:2] == [("strong", 2.0), ("seed", 1.0)]


def test_stronger_key_evidence_keeps_its_margins() -> None:
    # three matched keys against one: above the unit, the pool's best sets the scale
    pool = [candidate("three", key=3.0), candidate("one", key=1.5), candidate("hub", key=0.02)]
    scores = [c["score"] for c in fuse_blend(pool, None, Fusion())]
    assert scores == pytest.approx([1.0, 0.5, 0.02 / 3], abs=1e-6)


def test_without_a_reranker_the_graph_evidence_alone_decides() -> None:
    pool = [candidate("a", key=0.5), candidate("b", key=0.5, bm25=3.0, factor=0.5)]
    fused = fuse_blend(pool, None, Fusion())
    assert order(fused) == ["b", "a"]  # (0.5 + 1) × 0.5 against 0.5
    assert "rerank_score" not in fused[0] and fused[0]["score_kind"] == "blended_evidence"


def test_search_takes_no_experiment_knobs() -> None:
    with pytest.raises(BadRequest, match="unknown search field"):
        SearchRequest.parse({"query": "apple", "tuning": {"fusion": "lists"}})
    assert SearchRequest.parse({"query": "apple", "hops": 0}).hops == 0


def test_link_weighting_gives_auto_key_evidence_back_its_half_weight() -> None:
    # two memories whose key paths normalise to the same 1.0: one via an agent's key, one via
    # an auto-key (half a link); BM25 prefers the auto-keyed one a little
    agent, auto = candidate("agent", key=2.0, bm25=1.0), candidate("auto", key=2.0, bm25=1.2)
    agent["components"]["key_link"], auto["components"]["key_link"] = 1.0, 0.5
    other = candidate("other", bm25=1.6)  # no key at all
    pool = [agent, auto, other]
    unweighted = fuse_blend(pool, None, Fusion(link_weighted=False))
    assert order(unweighted) == ["auto", "agent", "other"]
    weighted = fuse_blend(pool, None, Fusion())  # the default weighs links
    assert order(weighted) == ["agent", "other", "auto"]
    assert weighted[2]["score"] == pytest.approx(0.5 + 1 / 3, abs=1e-6)


def test_a_pool_larger_than_one_reranker_call_is_scored_in_pieces() -> None:

    client = RecordingReranker(lambda p: float(p.removeprefix("p")))
    recall = Search(client)  # type: ignore[arg-type]
    pool = [{"content": f"p{i}"} for i in range(RERANK_MAX_PASSAGES + 6)]
    (relevance,) = recall._relevance("query", [pool], {})
    assert [len(c) for c in client.calls] == [RERANK_MAX_PASSAGES, 6]
    assert relevance is not None and relevance.scores == [float(i) for i in range(len(pool))]


def test_a_memory_is_as_relevant_as_the_better_of_its_text_and_its_writers_keys() -> None:
    # "b"'s text reads far from the query, its keys close: it counts at its keys' reading;
    # "a"'s keys read worse than its text, which it keeps; "c" has no keys of its writer
    pool = [candidate("a", bm25=1.0), candidate("b", bm25=1.0), candidate("c", bm25=1.0)]
    relevance = Relevance([0.5, 0.2, 0.4], "embedding_cosine", [0.1, 0.6, None])
    assert relevance.best() == [0.5, 0.6, 0.4]
    assert order(fuse_blend(pool, relevance, Fusion())) == ["b", "a", "c"]
    assert order(fuse_blend(pool, Relevance([0.5, 0.2, 0.4], "embedding_cosine"), Fusion())) == [
        "a",
        "c",
        "b",
    ]


def test_the_reranker_reads_each_about_in_the_same_calls_and_reports_the_text_score() -> None:

    pool: list[dict[str, Any]] = [
        {"content": "text one", "about": "keys one"},
        {"content": "text two", "about": None},
    ]
    client = RecordingReranker(lambda p: 0.9 if p.startswith("keys") else 0.3)
    (relevance,) = Search(client)._relevance("query", [pool], {})  # type: ignore[arg-type]
    assert client.passages == ["text one", "text two", "keys one"]
    assert relevance is not None
    assert relevance.scores == [0.3, 0.3] and relevance.about == [0.9, None]
    off = RecordingReranker(lambda p: 0.9 if p.startswith("keys") else 0.3)
    (plain,) = Search(off, Fusion(about=False))._relevance("query", [pool], {})  # type: ignore[arg-type]
    assert off.passages == ["text one", "text two"] and plain is not None
    assert plain.best() == [0.3, 0.3]


def test_a_memory_in_another_script_than_the_query_is_read_with_its_writers_name() -> None:

    statute = "제330조(야간주거침입절도) 야간에 사람의 주거에 침입하여 절취한 자는 처벌한다."
    pool: list[dict[str, Any]] = [
        {"content": statute, "about": "형법 330조 야간주거침입절도"},
        {"content": "Caroline went to the support group.", "about": "Caroline; support group"},
        {"content": statute, "about": None},  # no name from its writer: nothing more to read
    ]
    english = RecordingReranker(lambda p: 0.5 if "\n" in p else 0.2)
    (relevance,) = Search(english)._relevance("Is burglary at night punished?", [pool], {})  # type: ignore[arg-type]
    # the Korean statute is read as named; the English memory (the query's script) is not
    assert english.passages[3:] == [
        "형법 330조 야간주거침입절도",
        "Caroline; support group",
        f"형법 330조 야간주거침입절도\n{statute}",
    ]
    assert relevance is not None
    assert relevance.named == [0.5, None, None]
    assert relevance.best() == [0.5, 0.2, 0.2]
    assert relevance.scores == [0.2, 0.2, 0.2]  # rerank_score stays the text's (inject's floors)
    korean = RecordingReranker(lambda p: 0.5 if "\n" in p else 0.2)
    Search(korean)._relevance("야간에 주거에 침입한 절도는 처벌되는가?", [pool], {})  # type: ignore[arg-type]
    # a Korean question reads the statute as it is, and the English memory as named
    assert [p for p in korean.passages if "\n" in p] == [
        "Caroline; support group\nCaroline went to the support group."
    ]
    off = RecordingReranker(lambda p: 0.5 if "\n" in p else 0.2)
    Search(off, Fusion(cross_named=False))._relevance("Is burglary at night punished?", [pool], {})  # type: ignore[arg-type]
    assert not any("\n" in p for p in off.passages)


def test_a_named_reading_not_back_in_time_leaves_the_text_reading() -> None:
    # The idle-time warm-up embeds a memory's text, not its named text: on a first question
    # across scripts every named passage can be cold. Its calls are sent after the text's and
    # one past the reranker's share costs only the named reading, not the relevance of the
    # pool (with none, inject has nothing to cross scripts on and shows nothing).
    def named_still_embedding(passage: str) -> float | KeymemError:
        if "\n" in passage:  # a named passage
            return DeadlineExceeded("reranker.score took its budget")
        return 0.3

    statute = "제330조(야간주거침입절도) 야간에 사람의 주거에 침입하여 절취한 자는 처벌한다."
    pool: list[dict[str, Any]] = [
        {"content": statute, "about": "형법 330조"},
        {"content": statute + " 미수범도 처벌한다.", "about": "형법 342조"},
    ]
    client, degraded = RecordingReranker(named_still_embedding), dict[str, str]()
    (relevance,) = Search(client)._relevance("Is burglary at night punished?", [pool], degraded)  # type: ignore[arg-type]
    assert relevance is not None and not degraded
    assert relevance.named == [None, None] and relevance.best() == [0.3, 0.3]
    # the named passages travel in a call of their own, after the texts and abouts
    assert [len(c) for c in client.calls] == [4, 2]
    assert all("\n" in p for p in client.calls[-1])


def test_the_named_reading_stands_in_for_the_text_not_beside_it() -> None:
    # across scripts the text's cosine is weak: a named reading below it still replaces it
    relevance = Relevance([0.4, 0.3], "embedding_cosine", [0.1, None], [0.35, 0.5])
    assert relevance.best() == [0.35, 0.5]
    relevance = Relevance([0.4], "embedding_cosine", [0.6], [0.35])
    assert relevance.best() == [0.6]  # the writer's name alone still counts


def test_a_memory_about_another_person_gets_no_key_or_hop_evidence() -> None:
    # the question names Melanie; "theirs" is Caroline's memory reached through a key that
    # names Melanie: its key path and hop say it shares the question's words, not that it
    # answers about her. It keeps its BM25 and relevance; a memory naming nobody is unaffected.
    theirs = {**candidate("theirs", key=1.0, bm25=1.0, hop_share=0.15), "subject": "caroline"}
    hers = {**candidate("hers", key=0.2, bm25=1.0), "subject": "melanie"}
    nobody = {**candidate("nobody", bm25=0.5), "subject": None}
    pool = [theirs, hers, nobody]
    persons = frozenset({"melanie"})
    fused = {c["memory_id"]: c["score"] for c in fuse_blend(pool, None, Fusion(), persons)}
    assert fused == {"hers": pytest.approx(1.2), "theirs": 1.0, "nobody": 0.0}
    before = fuse_blend(pool, None, Fusion(subjects=False), persons)
    assert order(before) == ["theirs", "hers", "nobody"]
    # a question naming no one, or a memory about the named person, changes nothing
    assert order(fuse_blend(pool, None, Fusion())) == order(before)
    assert order(fuse_blend(pool, None, Fusion(), frozenset({"caroline"}))) == order(before)
    # inject's search keeps it: the gate judges whom a memory is about itself, and its premise
    # check needs to see another person's memory of the asked fact
    assert order(fuse_blend(pool, None, GATED_FUSION, persons)) == order(before)


def reached(name: str, *key_ids: str) -> dict[str, Any]:
    """A candidate and the matched keys that reached it."""
    return {**candidate(name), "matched_keys": list(key_ids)}


def key(key_id: str, match_type: str) -> dict[str, Any]:
    """A matched key as the graph reports it; every match but ``semantic`` is ``literal``."""
    return {"key_id": key_id, "match_type": match_type, "literal": match_type != "semantic"}


def test_a_comparison_puts_each_named_entitys_best_memory_first() -> None:
    ranked = [reached("best"), reached("tea", "k-tea"), reached("ber", "k-ber")]
    keys = [key("k-tea", "concept"), key("k-ber", "alias")]
    assert order(select_evidence(ranked, keys, 2)) == ["tea", "ber", "best"]


def test_keys_a_questions_words_only_lie_near_name_nothing_to_compare() -> None:
    # "May Person A or Person B ...": across scripts each English word meets some Korean
    # one-word auto-key (a ``phrase`` match); those are no entities, the blend's order stands
    ranked = [reached("best"), reached("w1", "k-1"), reached("w2", "k-2")]
    keys = [key("k-1", "phrase"), key("k-2", "phrase")]
    assert order(select_evidence(ranked, keys, 2)) == ["best", "w1", "w2"]


@given(st.text(alphabet="abcé XYZ 한국어 テスト 漢字 Жд 12,.!_-", max_size=60))
def test_a_head_crosses_the_questions_script_when_under_half_its_letters_are_in_it(
    head: str,
) -> None:
    # the definition, counted letter by letter; crosses_script settles most heads by search
    for script, letters in SCRIPTS.items():
        total = sum(ch.isalpha() for ch in head)
        own = sum(bool(letters.fullmatch(ch)) for ch in head)
        assert crosses_script(script, head) == (2 * own < total), script
