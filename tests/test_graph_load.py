"""The graph's start-up load: rows read in columns, checked a column at a time.

A restart must answer every read as the running graph did (records, link weights changed since
the last fold, version chains, flags), a damaged row must still be quarantined with its reason
while its sound neighbours load, and a key's vector must stay the one it was given through
every change of its namespace's matrix (the records read their vectors from it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest

from keymem.services.graph import GraphService, dedup
from keymem.services.graph import state as state_module
from keymem.services.graph.links import AUTO, LEARNED
from keymem.services.graph.state import GraphState
from keymem.services.graph.text import normalize_content
from keymem.store import database
from keymem.store.database import GraphStore, effective_links
from keymem.store.records import KeyAlias, KeyRecord, LinkRecord
from tests.graph_helpers import GRAPH_FILE, damage_file, key_id_of, open_graph
from tests.vectors import remember_body

GATE_S = 10.0  # how long a held normalisation waits before giving up (the test then fails)


def reads(graph: GraphService) -> dict[str, Any]:
    """What a client can read of the whole graph, and the link state ranking depends on."""
    state = graph.state
    ids = sorted(state.memories)
    by_namespace: dict[str, list[str]] = {}
    for memory_id in ids:
        by_namespace.setdefault(state.memories[memory_id].namespace, []).append(memory_id)
    return {
        "memories": {
            ns: graph.get_memories({"ids": members, "namespace": ns})["memories"]
            for ns, members in by_namespace.items()
        },
        "keys": {
            key_id: graph.read_key({"key_id": key_id, "namespace": key.namespace, "limit": 50})
            for key_id, key in sorted(state.keys.items())
        },
        "links": {
            (k, m): (link.weight, link.auto, link.learned)
            for m, links in state.mem_links.items()
            for k, link in links.items()
        },
        "by_key": {(k, m) for k, links in state.key_links.items() for m in links},
        "active": {k: n for k, n in state.active_count.items() if n},
        "flags": {
            m.id: (m.related_to, m.contradicts, m.near_duplicates) for m in state.memories.values()
        },
    }


def test_a_restart_answers_every_read_as_the_running_graph_did(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    try:
        first = graph.remember(remember_body("Dana prefers tabs", ["Dana", "indentation"]))
        fixed = graph.correct({"memory_id": first["saved"], "content": "Dana prefers spaces"})
        graph.remember(remember_body("커피는 하루 두 잔", ["coffee"], namespace="health"))
        linked = graph.remember(
            remember_body(
                "Linked notes on editors",
                ["indentation", "editor"],
                related_to=[fixed["new_id"]],
                ttl_seconds=3600,
            )
        )["saved"]
        # a twin with a shared key: the newer supersedes it and flags the conflict
        graph.remember(remember_body("Linked notes on editors", ["editor"]))
        editor = key_id_of(graph, "editor")
        # reinforced weights live in link_weights until a fold: the load must apply them
        graph.read_memory({"memory_id": fixed["new_id"], "via_key_id": key_id_of(graph, "Dana")})
        graph.dismiss({"memory_id": linked, "key_id": editor})
        before = reads(graph)
    finally:
        graph.close()
    assert len(before["links"]) >= 6 and any(w != 1.0 for w, _, _ in before["links"].values())
    graph = open_graph(tmp_path)
    try:
        assert graph.quarantine({})["count"] == 0
        assert reads(graph) == before
    finally:
        graph.close()


def test_damaged_rows_of_every_kind_are_quarantined_and_their_neighbours_load(
    tmp_path: Path,
) -> None:
    graph = open_graph(tmp_path)
    try:
        sound = graph.remember(remember_body("Sound memory", ["sound", "shared"]))["saved"]
        bent = graph.remember(remember_body("Bent memory", ["bent", "shared"]))["saved"]
        aged = graph.remember(remember_body("Aged memory", ["aged", "shared"]))["saved"]
        other = graph.remember(remember_body("다른 기억", ["other"], namespace="elsewhere"))
        keys = {c: key_id_of(graph, c) for c in ("sound", "shared", "bent", "aged")}
    finally:
        graph.close()
    path = tmp_path / GRAPH_FILE
    link_sql = "UPDATE links SET weight = ? WHERE key_id = ? AND memory_id = ?"
    damage_file(
        path,
        [
            (link_sql, [float("nan"), keys["shared"], sound]),
            (link_sql, [99.0, keys["sound"], sound]),
            ("UPDATE keys SET vector = ? WHERE id = ?", [b"\0\0\x80\x7f" * 512, keys["bent"]]),
            ("UPDATE memories SET access_count = -3 WHERE id = ?", [bent]),
            ("UPDATE memories SET expires_at = 'inf'::DOUBLE WHERE id = ?", [aged]),
            ("INSERT INTO links VALUES (?, 'nothing-here', 1.0, false, false)", [keys["aged"]]),
            ("INSERT INTO links VALUES (?, ?, 1.0, false, false)", [keys["aged"], other["saved"]]),
        ],
    )
    graph = open_graph(tmp_path)
    try:
        report = graph.quarantine({})
        reasons = {(q["table"], q["row"]): q["reason"] for q in report["rows"]}
        assert "link weight" in reasons[("links", f"{keys['shared']}/{sound}")]
        assert "link weight" in reasons[("links", f"{keys['sound']}/{sound}")]
        assert "finite" in reasons[("keys", keys["bent"])]
        assert "must not be negative" in reasons[("memories", bent)]
        assert "expires_at" in reasons[("memories", aged)]
        assert "missing" in reasons[("links", f"{keys['aged']}/nothing-here")]
        assert "different namespaces" in reasons[("links", f"{keys['aged']}/{other['saved']}")]
        state = graph.state
        assert {bent, aged}.isdisjoint(state.memories) and keys["bent"] not in state.keys
        # the sound rows around them load: the memory, its keys, the other namespace
        assert sound in state.memories and other["saved"] in state.memories
        assert state.link(keys["shared"], sound) is None
        assert set(state.mem_links[sound]) == set()
        assert graph.get_memories({"ids": [sound]})["memories"][0]["content"] == "Sound memory"
    finally:
        graph.close()


def test_key_vectors_read_in_batches_keep_their_keys_past_a_damaged_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The load reads key vectors a batch at a time into each namespace's matrix; every key
    must get its own vector back: in a sound file, after a batch holding a vector of another
    dimension (the rest then load one by one), and after a key of the right size but not finite
    leaves its namespace's matrix (its index then copies the rest instead of serving it)."""
    graph = open_graph(tmp_path)
    try:
        for i in range(7):
            keys = [f"topic {i}", f"place {i}"]
            graph.remember(remember_body(f"Fact number {i}", keys, namespace=f"ns{i % 2}"))
        given = {k.id: graph.state.key_vector(k).copy() for k in graph.state.keys.values()}
        bent = key_id_of(graph, "place 4", namespace="ns0")
        infinite = key_id_of(graph, "topic 2", namespace="ns0")  # not its namespace's last
    finally:
        graph.close()
    monkeypatch.setattr(database, "KEY_VECTORS_PER_FETCH", 3)
    vector_sql = "UPDATE keys SET vector = ? WHERE id = ?"
    cases = [
        ([], set()),
        ([(vector_sql, [b"\0\0\x80?" * 7, bent])], {bent}),
        (
            [
                (vector_sql, [given[bent].astype("<f4").tobytes(), bent]),
                (vector_sql, [b"\0\0\x80\x7f" * len(given[infinite]), infinite]),
            ],
            {infinite},
        ),
    ]
    for damage, expected in cases:
        damage_file(tmp_path / GRAPH_FILE, damage)
        graph = open_graph(tmp_path)
        try:
            state = graph.state
            loaded = {k.id: state.key_vector(k) for k in state.keys.values()}
            quarantined = {q["row"] for q in graph.quarantine({})["rows"] if q["table"] == "keys"}
        finally:
            graph.close()
        assert quarantined == expected
        assert set(loaded) == set(given) - quarantined
        for key_id, vector in loaded.items():
            assert np.array_equal(vector, given[key_id]), key_id


def unit(rng: np.random.Generator, dim: int) -> np.ndarray:
    vector = rng.standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


def assert_vectors(state: GraphState, given: dict[str, np.ndarray]) -> None:
    """Each key reads the vector it was given, from its namespace's one matrix."""
    assert set(state.keys) == set(given)
    for key_id, key in state.keys.items():
        index = state.indexes[key.namespace]
        assert index.matrix is not None
        assert np.array_equal(key.vector, given[key_id])
        assert np.array_equal(index.matrix[index.pos[key_id]], given[key_id])
        assert np.shares_memory(key.vector, index.matrix)


def test_key_vectors_stay_their_own_through_growth_deletes_and_alias_changes(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(7)
    dim = 16
    given: dict[str, np.ndarray] = {}
    store = GraphStore(tmp_path / GRAPH_FILE)
    store.set_meta({"dim": str(dim)})
    state = GraphState(store.load(), hub_min_links=50)

    def add(concept: str) -> KeyRecord:
        key = KeyRecord(f"k{len(given)}", "default", concept, "concept", 1.0, unit(rng, dim))
        given[key.id] = key.vector.copy()
        state.add_key(key)
        return key

    for i in range(3):
        add(f"seed {i}")
    state.add_alias(state.keys["k0"], KeyAlias("first alias"))
    store.commit(state.changes, state.head_seq)
    store.close()

    store = GraphStore(tmp_path / GRAPH_FILE)
    state = GraphState(store.load(), hub_min_links=50)
    store.close()
    assert_vectors(state, given)
    index = state.indexes["default"]
    assert index.matrix is not None
    capacity = len(index.matrix)
    added = [add(f"grown {i}") for i in range(capacity)]  # past the spare rows: it reallocates
    assert index.matrix is not None and len(index.matrix) > capacity
    assert_vectors(state, given)
    # rows swapped into and the last row
    for key in (state.keys["k1"], added[len(added) // 2], added[-1]):
        state.delete_key(key)
        del given[key.id]
        assert_vectors(state, given)
    state.remove_alias(state.keys["k0"], state.keys["k0"].aliases[0])
    assert_vectors(state, given)
    assert index.exact.get("first alias") is None


@pytest.mark.parametrize("namespaces", [1, 3])
def test_key_vectors_load_from_one_matrix_per_namespace(tmp_path: Path, namespaces: int) -> None:
    rng = np.random.default_rng(namespaces)
    dim = 8
    store = GraphStore(tmp_path / GRAPH_FILE)
    store.set_meta({"dim": str(dim)})
    state = GraphState(store.load(), hub_min_links=50)
    given = {}
    for i in range(40):
        vector = unit(rng, dim)
        key = KeyRecord(f"k{i}", f"ns{i % namespaces}", f"concept {i}", "concept", 1.0, vector)
        given[key.id] = vector.copy()
        state.add_key(key)
    store.commit(state.changes, state.head_seq)
    loaded = store.load()
    read = dict(loaded.key_matrices)
    state = GraphState(loaded, hub_min_links=50)
    store.close()
    assert_vectors(state, given)
    # one copy of each vector at start: every index serves the matrix the load read into
    assert read.keys() == state.indexes.keys()
    assert all(state.indexes[ns].matrix is matrix for ns, matrix in read.items())


def file_links(path: Path) -> list[tuple[str, str, float, bool, bool]]:
    """The file's links with their latest weights, by memory in the order the memories were
    written, each memory's in the order written: what a load must hold."""
    query = (
        "SELECT l.key_id, l.memory_id, l.weight, l.auto, l.learned "
        f"FROM ({effective_links(', l.rowid AS link_row')}) l "
        "JOIN memories m ON m.id = l.memory_id ORDER BY m.rowid, l.link_row"
    )
    conn = duckdb.connect(str(path), read_only=True)
    try:
        rows = conn.execute(query).fetchall()
    finally:
        conn.close()
    return [(str(k), str(m), float(w), bool(a), bool(ln)) for k, m, w, a, ln in rows]


def stored_graph(home: Path) -> dict[str, str]:
    """A closed graph file with hub keys, weights changed since the last fold, a learned
    link, a superseded version and two namespaces; returns ids of a few of its memories."""
    graph = open_graph(home)
    try:
        ids = {}
        for i in range(16):
            keys = ["shared", f"topic {i % 4}", f"own {i}"]
            ids[f"m{i}"] = graph.remember(remember_body(f"note number {i}", keys))["saved"]
        graph.remember(remember_body("다른 기억", ["shared"], namespace="elsewhere"))
        graph.correct({"memory_id": ids["m3"], "content": "note number three, corrected"})
        shared = key_id_of(graph, "shared")
        graph.read_memory({"memory_id": ids["m5"], "via_key_id": shared})
        graph.dismiss({"memory_id": ids["m6"], "key_id": shared})
        graph.reinforce_path(
            {
                "namespace": "default",
                "hit": ids["m7"],
                "keys": [shared],
                "associate": [key_id_of(graph, "own 12")],
            }
        )
        return ids
    finally:
        graph.close()


def test_loaded_links_answer_as_the_files_rows(tmp_path: Path) -> None:
    stored_graph(tmp_path)
    rows = file_links(tmp_path / GRAPH_FILE)
    assert any(learned for *_, learned in rows) and any(w != 1.0 for _, _, w, _, _ in rows)
    # the mappings as plain dicts would hold them, filled in the file's order
    by_key: dict[str, dict[str, tuple[float, bool, bool]]] = {}
    by_memory: dict[str, dict[str, tuple[float, bool, bool]]] = {}
    for k, m, w, auto, learned in rows:
        by_key.setdefault(k, {})[m] = by_memory.setdefault(m, {})[k] = (w, auto, learned)
    graph = open_graph(tmp_path)
    try:
        state = graph.state

        def plain(links: Mapping[str, LinkRecord]) -> dict[str, tuple[float, bool, bool]]:
            return {i: (ln.weight, ln.auto, ln.learned) for i, ln in links.items()}

        assert {k: list(plain(state.key_links[k]).items()) for k in state.key_links} == {
            k: list(links.items()) for k, links in by_key.items()
        }
        assert {m: plain(state.mem_links[m]) for m in state.mem_links} == by_memory
        for key_id, members in by_key.items():
            assert len(state.key_links[key_id]) == len(members)
            assert all(m in state.key_links[key_id] for m in members)
            ranked = sorted(members.items(), key=lambda item: -item[1][0])
            assert [ln.memory_id for ln in state.strongest(key_id, 5)] == [m for m, _ in ranked[:5]]
            # what a hop walk reads of the key: the same links, with the file's weights
            assert strongest_members(state, key_id, 5) == [(m, w) for m, (w, *_) in ranked[:5]]
        for memory_id in by_memory:
            # what a candidate's about and subject read: the links' flags, in the same order
            flags = state.links.key_flags(memory_id)
            assert [(k, bool(f & AUTO), bool(f & LEARNED)) for k, f in flags] == [
                (k, ln.auto, ln.learned) for k, ln in state.mem_links[memory_id].items()
            ]
        assert "nothing" not in state.key_links and len(state.mem_links["nothing"]) == 0
        assert state.link(next(iter(by_key)), "nothing") is None
    finally:
        graph.close()


def test_links_changed_after_the_load_are_read_and_kept(tmp_path: Path) -> None:
    ids = stored_graph(tmp_path)
    graph = open_graph(tmp_path)
    try:
        state = graph.state
        shared = key_id_of(graph, "shared")
        # a loaded link's weight, changed: every way in reads it, the ranking follows
        before = state.strongest(shared, 3)
        for _ in range(2):
            graph.read_memory({"memory_id": ids["m9"], "via_key_id": shared})
        weight = state.link(shared, ids["m9"]).weight  # type: ignore[union-attr]
        assert weight > before[0].weight
        assert state.key_links[shared][ids["m9"]].weight == weight
        assert state.mem_links[ids["m9"]][shared].weight == weight
        assert state.strongest(shared, 1)[0].memory_id == ids["m9"]
        assert strongest_members(state, shared, 1) == [(ids["m9"], weight)]
        # a link written after the load: seen both ways, after the loaded ones
        count = len(state.key_links[shared])
        new = graph.remember(remember_body("a newer note", ["shared", "fresh"]))["saved"]
        assert list(state.key_links[shared])[-1] == new
        assert len(state.key_links[shared]) == count + 1
        fresh = key_id_of(graph, "fresh")
        assert set(state.mem_links[new]) == {shared, fresh}
        assert strongest_members(state, fresh, 5) == [(new, state.mem_links[new][fresh].weight)]
        # a memory written since the load has a number of its own, the same at every ask
        number = state.links.memory_number(new)
        assert number not in {state.links.memory_number(m) for m in state.memories if m != new}
        assert state.strongest_columns(fresh, 5).numbers.tolist() == [number]
        # a loaded memory forgotten: its links leave every key, its own key goes with them
        own = key_id_of(graph, "own 11")
        graph.forget({"memory_id": ids["m11"]})
        assert ids["m11"] not in state.key_links[shared] and ids["m11"] not in state.mem_links
        assert own not in state.key_links and own not in state.keys
        assert len(state.key_links[shared]) == count
        expected = comparable(reads(graph))
    finally:
        graph.close()
    graph = open_graph(tmp_path)
    try:
        assert comparable(reads(graph)) == expected
    finally:
        graph.close()


def strongest_members(state: GraphState, key_id: str, count: int) -> list[tuple[str, float]]:
    """A key's strongest links as a hop walk reads them: (memory id, weight)."""
    columns = state.strongest_columns(key_id, count)
    return list(zip(columns.memory_ids, columns.weights.tolist(), strict=True))


def comparable(read: dict[str, Any]) -> dict[str, Any]:
    """``read`` with each memory's keys of equal weight in id order (the order in which the
    file returns a memory's links is DuckDB's own, so ties come back in any order) and
    without the key pages' scores (freshness decays between two reads seconds apart)."""
    for views in read["memories"].values():
        for view in views:
            view["keys"].sort(key=lambda k: (-k["link_weight"], k["key_id"]))
    for page in read["keys"].values():
        for handle in page["memories"]:
            del handle["score"]
    return read


def test_dedup_finds_a_text_by_its_hash_and_never_merges_another(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    try:
        first = graph.remember(remember_body("Dana  prefers TABS", ["Dana"]))["saved"]
        again = graph.remember(remember_body("dana prefers tabs", ["Dana"]))
        assert again["superseded"] == first and again["deduplicated"]
        # another text under the same hash (a collision, planted): saved as its own memory
        state = graph.state
        other = graph.remember(remember_body("Dana prefers spaces", ["Dana"]))["saved"]
        table = state.dedup["default"]
        table[hash(normalize_content("Sam prefers tabs"))] = other
        saved = graph.remember(remember_body("Sam prefers tabs", ["Sam"]))
        assert "superseded" not in saved and state.memories[other].active(time.time())
    finally:
        graph.close()


def test_reads_are_answered_while_the_dedup_table_builds_and_a_write_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table of every loaded memory's text is built on a thread (8.7 s of CPU at 1M kept
    `keymem up` waiting): the graph opens and reads while the build is held, and a duplicate
    written meanwhile waits for the table and is deduplicated against the loaded memory."""
    graph = open_graph(tmp_path)
    saved = graph.remember(remember_body("Dana prefers tabs", ["Dana"]))["saved"]
    graph.close()
    release, held_past_gate = threading.Event(), threading.Event()

    def gated(content: str) -> str:
        if not release.wait(timeout=GATE_S):
            held_past_gate.set()  # the opening thread itself waited here: the old load
        return normalize_content(content)

    monkeypatch.setattr(dedup, "normalize_content", gated)
    monkeypatch.setattr(state_module, "normalize_content", gated)
    graph = open_graph(tmp_path)
    try:
        read = graph.get_memories({"ids": [saved], "namespace": "default"})["memories"]
        assert [m["id"] for m in read] == [saved] and not release.is_set()
        threading.Timer(0.1, release.set).start()
        again = graph.remember(remember_body("dana  prefers TABS", ["Dana"]))
        assert again["superseded"] == saved and again["deduplicated"]
        assert not held_past_gate.is_set()
    finally:
        release.set()
        graph.close()
