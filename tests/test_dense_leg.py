"""The dense candidate leg (services/graph/memory_vectors.py, hybrid's ``_dense_members``):
memories proposed by their own text vectors, whatever words or keys they share with the query.
Real vectors (the shipped multilingual model, tests/vectors.py), a real graph file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest

from keymem.protocol.errors import BadRequest, Conflict
from keymem.services.graph import GraphService
from keymem.services.graph.embedding import VECTOR_BACKLOG_MAX
from keymem.services.graph.hybrid import Scoring
from keymem.services.graph.memory_vectors import (
    CODES,
    COMPACT_MIN_ROWS,
    MemoryVectors,
    code_of,
)
from tests.graph_helpers import GRAPH_FILE, damage_file, open_graph, table_counts
from tests.vectors import FINGERPRINT, remember_body, vector, vectors

PAINTS = "Melanie paints lake sunrises on weekends."
CAMPING = "Melanie took her kids camping in the mountains."
ADOPTION = "Caroline is researching adoption agencies."
POTTERY = "Caroline signed up for a pottery class downtown."
TEXTS = [PAINTS, CAMPING, ADOPTION, POTTERY]
# Korean, sharing no word and no script with the store: "going camping with the children"
CAMPING_KO = "아이들과 함께 산으로 캠핑을 갔다"
CAMPING_TRIP = "Caroline drove to the coast for a weekend by the sea."
WORDS = [f"item {i}" for i in range(70)]


@pytest.mark.parametrize("code", CODES)
def test_each_code_ranks_real_sentences_as_float32_does(code: str) -> None:
    store = MemoryVectors(code)
    for text, row in zip(TEXTS, vectors(TEXTS), strict=True):
        store.put("default", text, row)
    for query, expected in [
        ("a family trip to the mountains", CAMPING),
        (CAMPING_KO, CAMPING),
        ("ceramics lessons", POTTERY),
    ]:
        exact = sorted(TEXTS, key=lambda t: -float(vector(t) @ vector(query)))
        assert exact[0] == expected
        assert store.nearest("default", vector(query), 1, lambda _: True) == [expected]


def test_removed_replaced_and_refused_memories_are_not_proposed() -> None:
    store = MemoryVectors("i8")
    for text, row in zip(TEXTS, vectors(TEXTS), strict=True):
        store.put("default", text, row)
    query = vector("a family trip to the mountains")
    store.remove("default", CAMPING)
    assert CAMPING not in store.nearest("default", query, 4, lambda _: True)
    # a new version of a memory (a correction: a new id) is found where its new text is
    store.put("default", "corrected", vector(CAMPING))
    assert store.nearest("default", query, 1, lambda _: True) == ["corrected"]
    # what the caller refuses (an inactive memory) is skipped, the next ones fill its place
    assert store.nearest("default", query, 2, lambda m: m != "corrected")[0] != "corrected"
    assert len(store.nearest("default", query, 9, lambda _: True)) == 4
    assert store.nearest("other", query, 3, lambda _: True) == []
    assert len(store) == 4


def test_removed_rows_go_in_one_pass_and_are_never_proposed_meanwhile() -> None:
    """A removal costs O(1): the row stays, skipped, until a quarter of the rows (at least
    ``COMPACT_MIN_ROWS``) are removed; then one pass drops them all."""
    rows = np.random.default_rng(3).standard_normal((300, 512)).astype(np.float32)
    store = MemoryVectors("bits")
    for at, row in enumerate(rows):
        store.put_code("default", f"m{at}", code_of(row), 512)
    space = store.namespaces["default"]
    gone = [f"m{at}" for at in range(0, 300, 4)]  # 75: past a quarter of 300
    for memory_id in gone[: COMPACT_MIN_ROWS - 1]:
        store.remove("default", memory_id)
    assert len(space.ids) == 300 and len(store) == 300 - (COMPACT_MIN_ROWS - 1)
    for at in range(0, 300, 4)[: COMPACT_MIN_ROWS - 1]:
        assert f"m{at}" not in store.nearest("default", rows[at], 5, lambda _: True)
    for memory_id in gone[COMPACT_MIN_ROWS - 1 :]:
        store.remove("default", memory_id)
    assert len(space.ids) == len(store) == 300 - COMPACT_MIN_ROWS - (75 - COMPACT_MIN_ROWS)
    assert not space.removed or len(space.removed) < COMPACT_MIN_ROWS
    kept = [at for at in range(300) if at % 4]
    for at in kept[:20]:  # each kept memory is still its own nearest
        assert store.nearest("default", rows[at], 1, lambda _: True) == [f"m{at}"]


@pytest.fixture
def graph(tmp_path: Path) -> Iterator[GraphService]:
    service = open_graph(tmp_path)
    for content, keys in [
        (PAINTS, ["Melanie", "lake sunrise painting"]),
        (CAMPING, ["Melanie", "camping"]),
        (ADOPTION, ["Caroline", "adoption"]),
        (POTTERY, ["Caroline", "pottery"]),
    ]:
        service.remember(remember_body(content, keys, fingerprint=FINGERPRINT))
    vectorise(service)
    yield service
    service.close()


def vectorise(graph: GraphService) -> int:
    """What the memory service's idle-time pass does (services/memory/warmup.py): the
    backlog's heads embedded as passages, handed back to the graph; how many were stored."""
    backlog = graph.vector_backlog({"limit": VECTOR_BACKLOG_MAX})["memories"]
    if not backlog:
        return 0
    stored: int = graph.put_memory_vectors(
        {
            "memory_ids": [m["memory_id"] for m in backlog],
            "vectors": vectors([m["head"] for m in backlog]),
            "fingerprint": FINGERPRINT,
        }
    )["stored"]
    return stored


def pooled(graph: GraphService, question: str) -> dict[str, dict[str, Any]]:
    body = {"vector": vector(question), "text": question, "hops": 0}
    return {c["content"]: c["components"] for c in graph.recall_candidates(body)["candidates"]}


def test_the_leg_proposes_what_no_key_and_no_word_reaches(graph: GraphService) -> None:
    # no fallback:
    # the Korean question reaches no key and no word of the English store
    graph.scoring = Scoring(fallback=False, dense_leg=0)
    assert CAMPING not in pooled(graph, CAMPING_KO)
    graph.scoring = Scoring(fallback=False, dense_leg=2)
    found = pooled(graph, CAMPING_KO)
    assert found[CAMPING]["dense_rank"] == 1
    assert len(found) == 2  # as deep as the leg was asked to reach


def test_the_leg_proposes_no_forgotten_memory(graph: GraphService) -> None:
    graph.scoring = Scoring(fallback=False, dense_leg=4)
    camping = next(m.id for m in graph.state.memories.values() if m.content == CAMPING)
    graph.forget({"memory_id": camping})
    assert CAMPING not in pooled(graph, CAMPING_KO)


def test_without_a_query_vector_the_leg_stands_aside(graph: GraphService) -> None:
    # the embedder down: recall runs on literal keys and BM25, the leg proposes nothing
    graph.scoring = Scoring(fallback=False, dense_leg=4)
    found = graph.recall_candidates({"text": "camping", "hops": 0})["candidates"]
    assert {c["content"] for c in found} == {CAMPING}
    assert all(c["components"]["dense_rank"] is None for c in found)


def test_a_vector_of_another_width_proposes_nothing() -> None:
    store = MemoryVectors("bits")
    store.put("default", "m", vector(PAINTS))
    assert store.nearest("default", np.ones(8, dtype=np.float32), 1, lambda _: True) == []


def test_written_memories_wait_newest_first_and_a_restart_loads_their_codes(
    tmp_path: Path,
) -> None:
    """A write puts no model time on its acknowledgement: the memory waits in the backlog
    (not proposed) until its vector comes, which the file keeps; a restart loads the codes
    in bulk and proposes the same memories, with nothing left waiting."""
    graph = open_graph(tmp_path)
    texts = [f"{word} is on the shopping list" for word in WORDS]  # past one growth of rows
    for text in texts:
        graph.remember(remember_body(text, ["shopping"], fingerprint=FINGERPRINT))
    backlog = graph.vector_backlog({"limit": 2})
    assert backlog["missing"] == len(texts)
    assert [m["head"] for m in backlog["memories"]] == texts[::-1][:2]  # newest first
    query = {"vector": vector(CAMPING_KO), "text": CAMPING_KO, "hops": 0}
    graph.scoring = Scoring(fallback=False)
    assert graph.recall_candidates(query)["candidates"] == []  # nothing to propose yet
    while vectorise(graph):
        pass
    assert graph.vector_backlog({})["missing"] == 0
    proposed = [c["memory_id"] for c in graph.recall_candidates(query)["candidates"]]
    assert len(proposed) == min(len(texts), graph.scoring.dense_leg)
    graph.close()
    assert table_counts(tmp_path / GRAPH_FILE)["memory_vectors"] == len(texts)
    graph = open_graph(tmp_path)
    try:
        graph.scoring = Scoring(fallback=False)
        assert graph.vector_backlog({})["missing"] == 0
        again = [c["memory_id"] for c in graph.recall_candidates(query)["candidates"]]
        assert again == proposed
    finally:
        graph.close()


def test_a_schema_7_file_migrates_and_its_memories_are_vectorised(tmp_path: Path) -> None:
    """A user's v7 file (no memory vectors) opens in place: every active memory waits in the
    backlog, and once vectorised the leg finds a question in another script."""
    graph = open_graph(tmp_path)
    for content, keys in [(PAINTS, ["painting"]), (CAMPING, ["camping"]), (POTTERY, ["pottery"])]:
        graph.remember(remember_body(content, keys, fingerprint=FINGERPRINT))
    graph.close()
    conn = duckdb.connect(str(tmp_path / GRAPH_FILE))
    conn.execute("DROP TABLE memory_vectors")
    conn.execute("UPDATE meta SET value = '7' WHERE name = 'schema_version'")
    conn.close()
    graph = open_graph(tmp_path)
    try:
        assert graph.store.migrated_from == 7
        assert graph.vector_backlog({})["missing"] == 3
        assert vectorise(graph) == 3
        graph.scoring = Scoring(fallback=False)
        assert pooled(graph, CAMPING_KO)[CAMPING]["dense_rank"] == 1
    finally:
        graph.close()


def test_a_schema_8_code_of_a_head_that_asks_is_made_again(tmp_path: Path) -> None:
    """A v8 file's codes were made of the raw head; the cosine now reads a head without its
    questions, so the upgrade sends a memory that asks back to the backlog and keeps the rest."""
    asks = "Melanie: Wow, what an experience! How did it make you feel?"
    graph = open_graph(tmp_path)
    for content, keys in [(PAINTS, ["painting"]), (asks, ["museum"])]:
        graph.remember(remember_body(content, keys, fingerprint=FINGERPRINT))
    assert vectorise(graph) == 2
    graph.close()
    damage_file(
        tmp_path / GRAPH_FILE, [("UPDATE meta SET value = '8' WHERE name = ?", ["schema_version"])]
    )
    graph = open_graph(tmp_path)
    try:
        assert graph.store.migrated_from == 8
        assert [m["head"] for m in graph.vector_backlog({"limit": 4})["memories"]] == [asks]
        assert vectorise(graph) == 1
    finally:
        graph.close()


def test_a_code_a_start_cannot_use_is_made_again_and_kept_once(tmp_path: Path) -> None:
    """A code of another embedder, or a damaged one, sends its memory back to the backlog at
    the next start, and the file then keeps the new code alone: a fold stores a code without
    deleting by id (the table has no index), so the start drops the codes it cannot use."""
    graph = open_graph(tmp_path)
    for content, keys in [(PAINTS, ["painting"]), (CAMPING, ["camping"]), (POTTERY, ["pottery"])]:
        graph.remember(remember_body(content, keys, fingerprint=FINGERPRINT))
    assert vectorise(graph) == 3
    ids = {m.content: m.id for m in graph.state.memories.values()}
    graph.close()
    damage_file(
        tmp_path / GRAPH_FILE,
        [
            (
                "UPDATE memory_vectors SET fingerprint = 'other:model' WHERE memory_id = ?",
                [ids[PAINTS]],
            ),
            ("UPDATE memory_vectors SET code = '\\x00'::BLOB WHERE memory_id = ?", [ids[CAMPING]]),
        ],
    )
    graph = open_graph(tmp_path)
    assert graph.vector_backlog({})["missing"] == 2
    assert vectorise(graph) == 2
    graph.close()
    conn = duckdb.connect(str(tmp_path / GRAPH_FILE))
    rows = conn.execute(
        "SELECT memory_id, fingerprint, octet_length(code) FROM memory_vectors"
    ).fetchall()
    conn.close()
    assert sorted(r[0] for r in rows) == sorted(ids.values())  # one row a memory
    assert {(r[1], r[2]) for r in rows} == {(FINGERPRINT, len(code_of(vector(PAINTS))))}
    graph = open_graph(tmp_path)
    try:
        assert graph.vector_backlog({})["missing"] == 0
        graph.scoring = Scoring(fallback=False)
        assert pooled(graph, CAMPING_KO)[CAMPING]["dense_rank"] == 1
    finally:
        graph.close()


def test_a_correction_replaces_the_vector_with_the_new_texts(graph: GraphService) -> None:
    graph.scoring = Scoring(fallback=False)
    pottery = next(m.id for m in graph.state.memories.values() if m.content == POTTERY)
    graph.correct({**remember_body(CAMPING_TRIP, ["trip"]), "memory_id": pottery})
    # the old text is no longer proposed; the new one waits for its vector, then is
    assert POTTERY not in pooled(graph, "ceramics lessons")
    assert CAMPING_TRIP not in pooled(graph, "a drive to the coast")
    assert vectorise(graph) == 1
    assert pooled(graph, "a drive to the coast")[CAMPING_TRIP]["dense_rank"] == 1


def test_vectors_of_another_embedder_or_shape_are_refused(graph: GraphService) -> None:
    graph.forget(
        {"memory_id": next(m.id for m in graph.state.memories.values() if m.content == PAINTS)}
    )
    graph.remember(remember_body(CAMPING_TRIP, ["trip"], fingerprint=FINGERPRINT))
    (waiting,) = graph.vector_backlog({"limit": 5})["memories"]
    body = {"memory_ids": [waiting["memory_id"]], "vectors": vectors([CAMPING_TRIP])}
    with pytest.raises(Conflict, match="not comparable"):
        graph.put_memory_vectors({**body, "fingerprint": "other:model"})
    with pytest.raises(BadRequest, match="shape"):
        graph.put_memory_vectors(
            {**body, "vectors": vectors([PAINTS, POTTERY]), "fingerprint": FINGERPRINT}
        )
    assert graph.vector_backlog({})["missing"] == 1  # nothing changed
    # a vector for a memory that has one already, or is gone, changes nothing either
    stale = {"memory_ids": [waiting["memory_id"]], "vectors": vectors([CAMPING_TRIP])}
    assert graph.put_memory_vectors({**stale, "fingerprint": FINGERPRINT})["stored"] == 1
    assert graph.put_memory_vectors({**stale, "fingerprint": FINGERPRINT})["stored"] == 0
