"""keymem's end-to-end scenarios against the graph service, on a real DuckDB file and real vectors.

Each test is something a user of the memory would notice: a fact not coming back, an old
version still answered, a read that silently makes a memory look confirmed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keymem.protocol.errors import NotFound
from keymem.services.graph import GraphService, matching
from keymem.services.graph.hybrid import Scoring
from keymem.services.graph.profile import KeyProfile
from tests.graph_helpers import active_ids, key_id_of, open_graph
from tests.vectors import remember_body, vector, vectors


@pytest.fixture
def graph(tmp_path: Path) -> Iterator[GraphService]:
    service = open_graph(tmp_path)
    yield service
    service.close()


def hop_walk(graph: GraphService, body: dict[str, Any]) -> dict[str, Any]:
    """The breadth-first walk hybrid recall takes from its seeds (services/graph/hybrid.py)."""
    return matching.expand(graph.state, body, time.time())


def test_direct_recall_of_a_key(graph: GraphService) -> None:
    saved = graph.remember(
        remember_body("The user likes strawberries", ["strawberry", "fruit", "taste"])
    )["saved"]
    graph.remember(remember_body("Deploys run on Fridays", ["deploy", "friday"]))
    found = graph.match_keys({"vector": vector("strawberries"), "text": "strawberries", "top_k": 3})
    top = found["keys"][0]
    assert top["concept"] == "strawberry"
    assert top["match_type"] == "semantic" and top["cosine"] > 0.8
    assert active_ids(graph, top["key_id"]) == [saved]
    literal = graph.match_keys({"text": "do I like strawberry ice cream?"})["keys"]
    assert [k["concept"] for k in literal] == ["strawberry"]
    assert literal[0]["literal"] is True


def test_cross_lingual_synonyms_meet_through_recall_by_default(graph: GraphService) -> None:
    # The calibrated USE-m profile merges only near-identical keys (docs/CALIBRATION.md), so
    # coffee and 커피 stay two keys, and a Korean query still reaches the English one.
    english = graph.remember(remember_body("The user drinks coffee", ["coffee"]))["saved"]
    graph.remember(remember_body("커피는 에티오피아산을 좋아한다", ["커피"]))
    assert key_id_of(graph, "coffee") != key_id_of(graph, "커피")
    found = graph.match_keys({"vector": vector("커피"), "text": "커피"})["keys"]
    by_concept = {k["concept"]: k for k in found}
    assert by_concept["커피"]["match_type"] == "concept"
    assert by_concept["coffee"]["match_type"] == "semantic"
    assert active_ids(graph, by_concept["coffee"]["key_id"]) == [english]


def test_cross_lingual_alias_joins_one_key_and_matches_with_a_particle(
    graph: GraphService,
) -> None:
    graph.key_profile = KeyProfile(overrides={"short_key_merge": 0.9})  # merges close synonyms
    graph.remember(remember_body("The user drinks coffee every morning", ["coffee", "morning"]))
    second = graph.remember(remember_body("커피는 에티오피아산을 좋아한다", ["커피", "에티오피아"]))
    coffee = key_id_of(graph, "coffee")
    assert key_id_of(graph, "커피") == coffee
    assert "커피" in graph.read_key({"key_id": coffee})["key"]["aliases"]
    assert second["saved"] in active_ids(graph, coffee)
    # a Korean particle glued to the alias still matches it literally, word-bounded
    hits = graph.match_keys({"text": "커피를 얼마나 마셔?"})["keys"]
    assert [(k["key_id"], k["match_type"]) for k in hits] == [(coffee, "alias")]
    assert graph.match_keys({"text": "커피숍"})["keys"] == []
    # distinct-but-close concepts stay apart even then (Monday~Tuesday cosine 0.87)
    graph.remember(remember_body("Standup is on Monday", ["Monday"]))
    graph.remember(remember_body("Retro is on Tuesday", ["Tuesday"]))
    assert key_id_of(graph, "Monday") != key_id_of(graph, "Tuesday")


def test_association_reaches_memories_through_shared_keys(graph: GraphService) -> None:
    newton = graph.remember(
        remember_body(
            "Newton saw an apple fall and thought of gravity",
            ["Newton", "apple", "gravity"],
            key_types={"Newton": "name"},
        )
    )["saved"]
    apples = graph.remember(remember_body("Apples are red fruit", ["apple", "fruit", "red"]))
    berries = graph.remember(remember_body("The user likes strawberries", ["fruit", "strawberry"]))
    graph.remember(remember_body("Rust has no garbage collector", ["Rust", "memory"]))
    reached = hop_walk(graph, {"seeds": {newton: 1.0}, "hops": 2})["memories"]
    by_id = {row["memory_id"]: row for row in reached}
    assert by_id[apples["saved"]]["hop"] == 1
    assert by_id[berries["saved"]]["hop"] == 2
    assert by_id[apples["saved"]]["score"] > by_id[berries["saved"]]["score"]
    assert len(by_id) == 2  # the unrelated memory is not reachable
    one_hop = hop_walk(graph, {"seeds": {newton: 1.0}, "hops": 1})["memories"]
    assert [row["memory_id"] for row in one_hop] == [apples["saved"]]


def test_a_hop_keeps_its_freshest_best_memories_in_walk_order(graph: GraphService) -> None:
    """A hop keeps its ``per_hop`` best memories: a stale memory on the same key as fresh ones
    scores below them (freshness lowers the score of every path to it), and equal scores come
    back in the order the walk reached them, whichever memories the walk priced first."""
    seed = graph.remember(remember_body("The release train leaves on Mondays", ["release"]))
    stale = [
        graph.remember(
            remember_body(
                f"Release note {n} for the old branch", ["release"], decay_profile="transient"
            )
        )["saved"]
        for n in range(3)
    ]
    fresh = [
        graph.remember(
            remember_body(f"Release checklist step {n}", ["release"], decay_profile="permanent")
        )["saved"]
        for n in range(3)
    ]
    gone = graph.remember(remember_body("Release checklist step 9", ["release"]))["saved"]
    graph.forget({"memory_id": gone})
    body = {"seeds": {seed["saved"]: 1.0}, "hops": 1, "per_hop": 3}
    in_a_year = time.time() + 365 * 86_400  # transient memories are stale by then
    kept = matching.expand(graph.state, body, in_a_year)["memories"]
    assert [row["memory_id"] for row in kept] == fresh
    everything = matching.expand(graph.state, {**body, "per_hop": 10}, in_a_year)["memories"]
    assert [row["memory_id"] for row in everything] == fresh + stale
    assert everything[0]["score"] > everything[-1]["score"]


def test_related_to_links_are_followed(graph: GraphService) -> None:
    first = graph.remember(remember_body("Project Aurora started in May", ["Aurora"]))["saved"]
    second = graph.remember(
        remember_body("The launch slipped to June", ["launch"], related_to=[first])
    )["saved"]
    reached = hop_walk(graph, {"seeds": {first: 1.0}, "hops": 1})["memories"]
    assert [(r["memory_id"], r["via"]) for r in reached] == [(second, "related_to")]


def test_correction_supersedes_and_keeps_the_whole_history(graph: GraphService) -> None:
    first = graph.remember(
        remember_body("The user lives in Seoul", ["residence", "Seoul"], decay_profile="stable")
    )["saved"]
    residence = key_id_of(graph, "residence")
    second = graph.correct({"memory_id": first, "content": "The user moved to Busan"})
    third = graph.correct({"memory_id": second["new_id"], "content": "The user moved to Jeju"})
    assert active_ids(graph, residence) == [third["new_id"]]  # new found, old excluded
    old = graph.read_memory({"memory_id": first})["memory"]  # old still readable
    assert old["content"] == "The user lives in Seoul" and old["active"] is False
    assert old["superseded_by"] == second["new_id"]
    versions = graph.history({"memory_id": second["new_id"]})["versions"]
    assert [v["id"] for v in versions] == [first, second["new_id"], third["new_id"]]
    assert [v["active"] for v in versions] == [False, False, True]
    newest = graph.get_memories({"ids": [third["new_id"]]})["memories"][0]
    assert newest["validity"]["decay_profile"] == "stable"  # inherited
    link_weights = {k["concept"]: k["link_weight"] for k in newest["keys"]}
    assert link_weights == {"residence": 0.7}  # inherited links start lower
    assert second["dropped_keys"] == ["Seoul"]  # only the old text named it
    assert graph.get_memories({"ids": [first]})["missing"] == [first]


def test_reads_never_change_depth_or_freshness(graph: GraphService) -> None:
    saved = graph.remember(remember_body("The office wifi is km-guest", ["wifi", "office"]))
    before = graph.get_memories({"ids": [saved["saved"]]})["memories"][0]
    wifi = key_id_of(graph, "wifi")
    for _ in range(5):
        graph.read_memory({"memory_id": saved["saved"], "via_key_id": wifi})
        graph.read_key({"key_id": wifi})
    after = graph.get_memories({"ids": [saved["saved"]]})["memories"][0]
    assert after["depth"] == before["depth"] == 0.0
    assert after["validity"]["last_confirmed_at"] == before["validity"]["last_confirmed_at"]
    assert after["validity"]["confirmation_count"] == 1
    assert after["access_count"] == 5


def test_name_keys_never_match_semantically(graph: GraphService) -> None:
    graph.remember(
        remember_body("Newton wrote the Principia", ["Newton"], key_types={"Newton": "name"})
    )
    graph.remember(remember_body("뉴턴은 사과를 보았다", ["뉴턴"], key_types={"뉴턴": "name"}))
    assert key_id_of(graph, "Newton") != key_id_of(graph, "뉴턴")  # never merged by similarity
    semantic = graph.match_keys({"vector": vector("Newton"), "min_cosine": 0.0})["keys"]
    assert semantic == []  # cosine 1.0 with its own vector, still no semantic match
    literal = graph.match_keys({"vector": vector("Newton"), "text": "what did Newton write"})
    assert [(k["concept"], k["score"]) for k in literal["keys"]] == [("Newton", 1.0)]


def test_the_querys_own_phrases_reach_keys_its_whole_vector_cannot(graph: GraphService) -> None:
    # an English question and a Korean one-word key: far apart as a whole, close word by word
    saved = graph.remember(remember_body("선거권은 선거일 현재로 판단한다", ["선거"]))["saved"]
    graph.remember(remember_body("딸기는 봄에 난다", ["딸기"]))
    question = "Can Person A exercise their right to vote on election day?"
    assert graph.match_keys({"vector": vector(question)})["keys"] == []
    phrases = vectors(["Person A", "exercise", "right", "vote", "election"])
    body = {"vector": vector(question), "phrase_vectors": phrases}
    found = graph.match_keys(body)["keys"]
    assert [(k["concept"], k["match_type"]) for k in found] == [("선거", "phrase")]
    assert found[0]["score"] > 0.8
    # by default a phrase's key leads only through auto-keys' links (word-level keys); no
    # memory vector is made here, so the dense leg proposes nothing
    graph.scoring = Scoring(fallback=False)
    assert graph.recall_candidates({**body, "text": question})["candidates"] == []
    graph.scoring = Scoring(phrase_links="all")
    reached = graph.recall_candidates({**body, "text": question})["candidates"]
    assert [c["memory_id"] for c in reached] == [saved]
    assert reached[0]["components"]["key_link"] == 1.0  # an agent's key: a whole link


def test_two_auto_keys_sharing_a_word_make_no_hop(graph: GraphService) -> None:
    # keyless memories whose extracted keys share "garden": co-occurrence, not an association
    seed = remember_body("The garden gate is red", ["gate", "garden"], auto_keys=["gate", "garden"])
    graph.remember(seed)
    other = remember_body("Tomatoes grow in the garden", ["garden"], auto_keys=["garden"])
    reached = graph.remember(other)["saved"]
    body = {"vector": vector("gate"), "text": "gate", "hops": 1}
    graph.scoring = Scoring(fallback=False)
    assert reached not in [c["memory_id"] for c in graph.recall_candidates(body)["candidates"]]
    graph.scoring = Scoring(fallback=False, auto_hops=True)
    walked = graph.recall_candidates(body)["candidates"]
    hop = next(c for c in walked if c["memory_id"] == reached)["components"]
    assert hop["hop"] == 1 and hop["hop_link"] == 0.25  # two half-weight links
    # a link a read taught is an association, though marked auto
    link = graph.state.link(key_id_of(graph, "garden"), reached)
    assert link is not None
    link.learned = True
    graph.scoring = Scoring(fallback=False)
    taught = graph.recall_candidates(body)["candidates"]
    assert reached in [c["memory_id"] for c in taught]


def test_the_seed_steps_through_keys_its_text_names_whatever_the_write_order(
    graph: GraphService,
) -> None:
    # the film came first, so auto-keys could not link it to its director's key
    film = remember_body(
        "Big Stone Gap is a romantic comedy directed by Adriana Trigiani", ["Big Stone Gap"]
    )
    graph.remember(film)
    person = remember_body("She lives in Greenwich Village, New York", ["Adriana Trigiani"])
    director = graph.remember(person)["saved"]
    body = {"vector": vector("Big Stone Gap"), "text": "Big Stone Gap"}
    graph.scoring = Scoring(fallback=False, named_hops=False)
    plain = graph.recall_candidates(body)["candidates"]
    assert director not in [c["memory_id"] for c in plain]
    graph.scoring = Scoring(fallback=False)
    named = graph.recall_candidates(body)["candidates"]
    hop = next(c for c in named if c["memory_id"] == director)["components"]
    assert hop["hop"] == 1 and hop["hop_link"] == 0.5  # an agent's link and a named one
    # one step passes on 0.3 of the seed's evidence (x IDF 1 x the director's link 1)
    assert hop["hop_share"] == pytest.approx(0.3, rel=0.01)


def test_exact_duplicate_is_deduplicated_within_a_namespace(graph: GraphService) -> None:
    first = graph.remember(remember_body("The user prefers dark mode", ["theme", "dark mode"]))
    again = graph.remember(remember_body("  the user PREFERS dark   mode ", ["theme"]))
    assert again["superseded"] == first["saved"]
    assert again["deduplicated"] is True and again["conflict"] is True
    assert active_ids(graph, key_id_of(graph, "theme")) == [again["saved"]]
    elsewhere = graph.remember(
        remember_body("The user prefers dark mode", ["theme"], namespace="work")
    )
    assert "superseded" not in elsewhere
    paraphrase = graph.remember(remember_body("Dark mode is what the user prefers", ["theme"]))
    assert "superseded" not in paraphrase  # paraphrases are separate records
    third = graph.remember(remember_body("The user prefers dark mode.", ["theme"]))
    assert "superseded" not in third  # punctuation makes it a different text
    fourth = graph.remember(remember_body("the user prefers dark mode", ["theme"]))
    assert fourth["superseded"] == again["saved"]  # the chain keeps deduplicating


def test_ttl_expiry_removes_the_memory(graph: GraphService) -> None:
    kept = graph.remember(remember_body("The user is allergic to peanuts", ["allergy"]))
    brief = graph.remember(
        remember_body("Meeting room B is booked today", ["meeting", "allergy"], ttl_seconds=0.3)
    )
    allergy = key_id_of(graph, "allergy")
    assert set(active_ids(graph, allergy)) == {kept["saved"], brief["saved"]}
    time.sleep(0.35)
    assert active_ids(graph, allergy) == [kept["saved"]]  # expired reads as gone at once
    with pytest.raises(NotFound):
        graph.read_memory({"memory_id": brief["saved"]})
    graph.sweep()
    assert brief["saved"] not in graph.state.memories
    head = graph.feed_head({})["seq"]
    last = graph.feed_since({"seq": head - 1})["events"]
    assert [(e["op"], e["id"]) for e in last] == [("delete", brief["saved"])]


def test_hebbian_reinforces_only_the_traversed_edge(graph: GraphService) -> None:
    saved = graph.remember(remember_body("Alice leads the data team", ["Alice", "data team"]))
    alice, team = key_id_of(graph, "Alice"), key_id_of(graph, "data team")
    graph.read_memory({"memory_id": saved["saved"], "via_key_id": alice})
    weights = {
        k["key_id"]: k["link_weight"]
        for k in graph.get_memories({"ids": [saved["saved"]]})["memories"][0]["keys"]
    }
    assert weights == {alice: 1.1, team: 1.0}
    for _ in range(30):
        graph.read_memory({"memory_id": saved["saved"], "via_key_id": alice})
    view = graph.read_key({"key_id": alice})["memories"][0]
    assert view["link_weight"] == 3.0  # capped


def test_dismiss_weakens_one_edge_down_to_the_floor(graph: GraphService) -> None:
    saved = graph.remember(remember_body("Bob likes jazz", ["Bob", "jazz"]))["saved"]
    jazz = key_id_of(graph, "jazz")
    first = graph.dismiss({"memory_id": saved, "key_id": jazz})
    assert (first["previous_link_weight"], first["link_weight"], first["floored"]) == (
        1.0,
        0.7,
        False,
    )
    for _ in range(5):
        last = graph.dismiss({"memory_id": saved, "key_id": jazz})
    assert last["link_weight"] == 0.1 and last["floored"] is True
    assert active_ids(graph, jazz) == [saved]  # never severed
    bob = key_id_of(graph, "Bob")
    assert graph.read_key({"key_id": bob})["memories"][0]["link_weight"] == 1.0


def test_namespaces_isolate_everything(graph: GraphService) -> None:
    home = graph.remember(remember_body("Dinner at seven", ["dinner"], namespace="Home "))
    work = graph.remember(remember_body("Dinner with the client", ["dinner"], namespace="work"))
    home_key = key_id_of(graph, "dinner", "home")
    work_key = key_id_of(graph, "dinner", "work")
    assert home_key != work_key
    assert active_ids(graph, home_key, "home") == [home["saved"]]
    found = graph.match_keys({"namespace": "WORK", "vector": vector("dinner"), "text": "dinner"})
    assert [k["key_id"] for k in found["keys"]] == [work_key]
    with pytest.raises(NotFound):
        graph.read_memory({"memory_id": work["saved"], "namespace": "home"})
    with pytest.raises(NotFound):
        graph.read_key({"key_id": work_key, "namespace": "home"})
    assert graph.match_keys({"vector": vector("dinner"), "text": "dinner"})["keys"] == []
    assert hop_walk(graph, {"seeds": {home["saved"]: 1.0}, "namespace": "work"})["memories"] == []


def test_hubs_come_first_and_read_key_paginates(graph: GraphService) -> None:
    ids = [
        graph.remember(remember_body(f"Project note number {i}", ["project", f"note {i}"]))["saved"]
        for i in range(12)
    ]
    graph.remember(remember_body("A lone fact", ["lonely"]))
    browse = graph.browse_keys({"limit": 3})
    assert browse["keys"][0]["concept"] == "project"
    assert browse["keys"][0]["is_hub"] is True and browse["keys"][0]["memory_count"] == 12
    assert browse["keys"][0]["specificity"] == pytest.approx(1 / 12, abs=1e-3)
    assert all(not k["is_hub"] for k in browse["keys"][1:])
    assert [k["concept"] for k in graph.browse_keys({"hubs_only": True})["keys"]] == ["project"]
    project = browse["keys"][0]["key_id"]
    seen: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = graph.read_key({"key_id": project, "limit": 5, "offset": offset})
        assert page["total"] == 12
        seen += [h["memory_id"] for h in page["memories"]]
        offset = page["next_offset"]
    assert sorted(seen) == sorted(ids)


def test_confirm_is_idempotent_per_turn(graph: GraphService) -> None:
    saved = graph.remember(remember_body("The API key rotates monthly", ["api key"]))["saved"]
    turn = {"host_agent": "claude-code", "host_session": "s1", "host_turn": 4}
    first = graph.confirm_memory({"memory_id": saved, "evidence": "user", "source": turn})
    again = graph.confirm_memory({"memory_id": saved, "evidence": "user", "source": turn})
    assert first["confirmed"] is True and again["duplicate"] is True
    assert graph.get_memories({"ids": [saved]})["memories"][0]["depth"] == 0.05
    later = {**turn, "host_turn": 5}
    graph.confirm_memory({"memory_id": saved, "evidence": "observation", "source": later})
    memory = graph.get_memories({"ids": [saved]})["memories"][0]
    assert memory["depth"] == 0.1 and memory["validity"]["confirmation_count"] == 3


def test_confirmed_reads_teach_an_alias(graph: GraphService) -> None:
    saved = graph.remember(remember_body("The user drinks coffee black", ["coffee"]))["saved"]
    coffee = key_id_of(graph, "coffee")
    learned = None
    for _ in range(3):
        hit = graph.match_keys({"vector": vector("espresso"), "text": "espresso"})["keys"]
        assert hit[0]["key_id"] == coffee and hit[0]["match_type"] == "semantic"
        learned = graph.read_memory({"memory_id": saved, "via_key_id": coffee}).get("learned_alias")
    assert learned == "espresso"
    literal = graph.match_keys({"text": "an espresso please"})["keys"]
    assert [(k["key_id"], k["match_type"]) for k in literal] == [(coffee, "alias")]
    assert graph.read_key({"key_id": coffee})["key"]["learned_aliases"] == ["espresso"]


def test_forget_deletes_the_memory_and_its_links(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    saved = graph.remember(remember_body("Temporary secret", ["secret", "shared"]))["saved"]
    other = graph.remember(remember_body("Another fact", ["shared"]))["saved"]
    fixed = graph.correct({"memory_id": saved, "content": "Temporary secret, rotated"})
    deleted = graph.forget({"memory_id": fixed["new_id"]})["deleted"]
    assert deleted == [fixed["new_id"], saved]
    with pytest.raises(NotFound):
        graph.read_memory({"memory_id": saved})
    assert active_ids(graph, key_id_of(graph, "shared")) == [other]
    assert "secret" not in graph.state.indexes["default"].exact  # orphan key dropped
    graph.close()
    reopened = open_graph(tmp_path)
    try:
        assert set(reopened.state.memories) == {other}
    finally:
        reopened.close()


def test_everything_survives_a_restart(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    saved = graph.remember(remember_body("Carol uses Vim", ["Carol", "editor"]))["saved"]
    carol = key_id_of(graph, "Carol")
    graph.read_memory({"memory_id": saved, "via_key_id": carol})
    graph.confirm_memory({"memory_id": saved, "evidence": "user"})
    view = graph.get_memories({"ids": [saved]})["memories"][0]
    head = graph.feed_head({})
    graph.close()
    reopened = open_graph(tmp_path)
    try:
        assert reopened.get_memories({"ids": [saved]})["memories"][0] == view
        assert reopened.feed_head({}) == head
        assert reopened.match_keys({"text": "Carol"})["keys"][0]["key_id"] == carol
    finally:
        reopened.close()


def test_a_new_key_near_an_existing_one_comes_back_as_a_hint(graph: GraphService) -> None:
    graph.remember(remember_body("The user drinks coffee", ["coffee"]))
    reply = graph.remember(remember_body("Caffeine keeps the user up", ["caffeine", "sleep"]))
    hints = reply["hints"]["near_keys"]
    assert [(h["your_key"], h["existing_concept"]) for h in hints] == [("caffeine", "coffee")]
    assert 0.45 <= hints[0]["similarity"] < 0.98
    again = graph.remember(remember_body("More caffeine", ["caffeine"]))
    assert "hints" not in again  # reusing a key coins nothing


def test_weight_changes_survive_a_crash_before_they_are_folded(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    saved = graph.remember(remember_body("Frank runs the CI", ["Frank", "CI"]))["saved"]
    frank, ci = key_id_of(graph, "Frank"), key_id_of(graph, "CI")
    graph.flush_due()  # each write reaches the file on its own (the worker's timer between)
    graph.read_memory({"memory_id": saved, "via_key_id": frank})
    graph.flush_due()
    graph.read_memory({"memory_id": saved, "via_key_id": frank})
    graph.flush_due()
    graph.dismiss({"memory_id": saved, "key_id": ci})
    graph.flush_due()
    graph.store.conn.close()  # no fold, no checkpoint: what kill -9 leaves behind
    reopened = open_graph(tmp_path)
    try:
        weights = {k: ln.weight for k, ln in reopened.state.mem_links[saved].items()}
        assert weights == {frank: pytest.approx(1.2), ci: pytest.approx(0.7)}
        assert reopened.store.fold_link_weights(min_rows=1) == 3
        rows = reopened.store.conn.execute("SELECT key_id, weight FROM links").fetchall()
        assert dict(rows) == {frank: pytest.approx(1.2), ci: pytest.approx(0.7)}
    finally:
        reopened.close()
