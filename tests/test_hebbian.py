"""Learning from the hook's traffic: a surfaced memory that is then read grows its path.

Real services in one process (tests/full_stack.py): inject through the memory service, read
through it, and weights read back from the graph.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from keymem.protocol.errors import BadRequest, NotFound
from keymem.services.graph.feedback import (
    LEARNED_LINK_WEIGHT,
    LEARNED_MAX_PER_KEY,
    LEARNED_MAX_PER_MEMORY,
    PATH_CEILING_FACTOR,
    PATH_GROWTH_RATE,
    specificity,
)
from keymem.services.memory.learning import SurfacedLog, Surfacing
from keymem.store.database import GraphStore
from keymem.store.portable import export_graph, import_graph, read_export
from tests.full_stack import FullStack, full_stack
from tests.graph_helpers import GRAPH_FILE, open_graph
from tests.vectors import remember_body

NEWTON = "Newton discovered gravity when an apple fell on his head"
EINSTEIN = "Einstein explained gravity as the curvature of spacetime"
PROMPT = "What did Newton discover about gravity when the apple fell?"
DEPLOY = "The team ships on Tuesday at 14:00 UTC, after the standup"
FREEZE = "The release freeze starts on the first of December"
TRAIN_PROMPT = "During the release freeze, does the team still ship on Tuesday?"
# Unrelated memories, so that "gravity" (on 2 of 8 memories) is a specific key, as in any real
# store, rather than a hub of a two-memory namespace.
FILLERS = [
    ("The office coffee machine is descaled every Friday", ["coffee machine", "Friday"]),
    ("Marta prefers tabs over spaces in Go code", ["Marta", "tabs"]),
    ("The staging database lives on host db-stage-02", ["staging database", "db-stage-02"]),
    ("Quarterly reports are due on the fifth working day", ["quarterly report"]),
    ("The cat is called Miso and hates the vacuum cleaner", ["Miso", "vacuum cleaner"]),
    ("Backups are copied to the cold bucket every night", ["backups", "cold bucket"]),
]


def weights(running: FullStack, memory_id: str) -> dict[str, float]:
    """The memory's link weights by key concept, as the graph holds them."""
    reply = running.client.call("graph", "memory_keys", {"memory_ids": [memory_id]})
    return {row["concept"]: float(row["weight"]) for row in reply["memories"][memory_id]}


def surface(running: FullStack, session_id: str | None = None) -> list[str]:
    body: dict[str, object] = {"prompt": PROMPT}
    if session_id is not None:
        body["session_id"] = session_id
    reply = running.memory("inject", body)
    return [m["id"] for m in reply["memories"]]


@pytest.fixture
def running(tmp_path: Path) -> Iterator[FullStack]:
    with full_stack(tmp_path) as stack:
        stack.ids["newton"] = stack.remember(NEWTON, ["Newton", "gravity", "apple"])
        stack.ids["einstein"] = stack.remember(EINSTEIN, ["Einstein", "gravity", "spacetime"])
        for content, keys in FILLERS:
            stack.remember(content, keys)
        stack.search("Newton", top_k=1)  # read-your-writes: the lexicon has both
        yield stack


def test_reading_a_surfaced_memory_grows_the_path_that_surfaced_it(running: FullStack) -> None:
    newton = running.ids["newton"]
    assert newton in surface(running)
    before = weights(running, newton)
    read = running.memory("read_memory", {"memory_id": newton})
    after = weights(running, newton)
    grown = {row["key_id"] for row in read["surfaced_path"]["reinforced"]}
    assert grown, "the read taught nothing"
    step = PATH_GROWTH_RATE * (PATH_CEILING_FACTOR * 1.0 - 1.0)  # agent keys start at 1.0
    assert after["Newton"] == pytest.approx(before["Newton"] + step, abs=1e-4)
    assert all(after[c] >= before[c] for c in before)
    assert sum(after.values()) > sum(before.values())


def test_a_read_of_a_memory_nobody_surfaced_changes_no_weight(running: FullStack) -> None:
    before = {name: weights(running, i) for name, i in running.ids.items()}
    read = running.memory("read_memory", {"memory_id": running.ids["einstein"]})
    assert "surfaced_path" not in read
    assert {name: weights(running, i) for name, i in running.ids.items()} == before


def test_repeated_reads_count_once_and_weights_stay_under_the_ceiling(
    running: FullStack,
) -> None:
    newton = running.ids["newton"]
    start = weights(running, newton)
    surface(running)
    for _ in range(5):
        running.memory("read_memory", {"memory_id": newton})
    once = weights(running, newton)
    step = PATH_GROWTH_RATE * (PATH_CEILING_FACTOR - 1.0)
    assert once["Newton"] == pytest.approx(start["Newton"] + step, abs=1e-4)
    for _ in range(40):  # every prompt surfaces it and every surfacing is read
        surface(running)
        running.memory("read_memory", {"memory_id": newton})
    saturated = weights(running, newton)
    assert max(saturated.values()) <= PATH_CEILING_FACTOR * 1.0
    assert saturated["Newton"] > 1.9  # it did learn: 1 + (1 - 0.9**41)


def test_shown_but_unread_neighbours_decay_back_towards_their_start(running: FullStack) -> None:
    newton, einstein = running.ids["newton"], running.ids["einstein"]
    for _ in range(5):  # teach the shared key "gravity" to lead to Einstein
        running.memory("inject", {"prompt": "How did Einstein explain gravity and spacetime?"})
        running.memory("read_memory", {"memory_id": einstein})
    learned = weights(running, einstein)
    assert learned["gravity"] > 1.0
    surfaced = surface(running)
    assert newton in surfaced
    read = running.memory("read_memory", {"memory_id": newton})
    decayed = weights(running, einstein)
    assert einstein in {row["memory_id"] for row in read["surfaced_path"]["decayed"]}
    assert 1.0 <= decayed["gravity"] < learned["gravity"]
    assert decayed["Einstein"] == pytest.approx(learned["Einstein"])  # not on the path


def test_a_read_from_another_session_does_not_credit_this_one(running: FullStack) -> None:
    newton = running.ids["newton"]
    surface(running, session_id="session-a")
    before = weights(running, newton)
    other = running.memory("read_memory", {"memory_id": newton, "session_id": "session-b"})
    assert "surfaced_path" not in other and weights(running, newton) == before
    same = running.memory("read_memory", {"memory_id": newton, "session_id": "session-a"})
    assert same["surfaced_path"]["reinforced"] and weights(running, newton) != before


def test_an_expired_surfacing_teaches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEYMEM_LEARN_TTL_S", "0.3")
    with full_stack(tmp_path) as running:
        newton = running.remember(NEWTON, ["Newton", "gravity", "apple"])
        running.search("Newton", top_k=1)
        assert newton in surface(running)
        before = weights(running, newton)
        time.sleep(0.5)
        read = running.memory("read_memory", {"memory_id": newton})
        assert "surfaced_path" not in read
        assert weights(running, newton) == before


def test_the_surfaced_log_is_bounded_in_entries_and_age() -> None:
    now = [0.0]
    log = SurfacedLog(ttl_s=10.0, max_entries=3, clock=lambda: now[0])

    def entry(memory_id: str) -> Surfacing:
        return Surfacing(memory_id, "default", ("k",), (), None, now[0])

    log.record([entry("a"), entry("b"), entry("c"), entry("d")])
    assert len(log) == 3 and log.claim("a", "default", None) is None  # the oldest went first
    assert log.claim("b", "default", None) is not None
    assert log.claim("b", "default", None) is None  # claimed once
    now[0] = 11.0
    assert len(log) == 0 and log.claim("c", "default", None) is None


def test_concurrent_reads_of_one_surfacing_are_credited_once() -> None:
    log = SurfacedLog()
    log.record([Surfacing("m", "default", ("k",), (), None, log.clock())])
    credited: list[Surfacing] = []
    start = threading.Barrier(4)

    def reader() -> None:
        start.wait()
        for _ in range(200):
            found = log.claim("m", "default", None)
            if found is not None:
                credited.append(found)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(credited) == 1


def test_an_odd_session_id_never_costs_the_prompt_its_memories(running: FullStack) -> None:
    reply = running.memory("inject", {"prompt": PROMPT, "session_id": "x" * 1_000})
    assert running.ids["newton"] in [m["id"] for m in reply["memories"]]


def test_association_is_off_unless_switched_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the dev files association did not pay on held-out questions, so by default a read
    only reinforces the path (docs/BENCHMARKS.md, "Learning from the hook's traffic")."""
    monkeypatch.delenv("KEYMEM_LEARN_ASSOCIATE", raising=False)
    with full_stack(tmp_path) as stack:
        deploy = stack.remember(DEPLOY, ["deploy window", "Tuesday"])
        stack.remember(FREEZE, ["release freeze"])
        for content, keys in FILLERS:
            stack.remember(content, keys)
        stack.search("release freeze", top_k=1)
        shown = stack.memory("inject", {"prompt": TRAIN_PROMPT})
        assert deploy in [m["id"] for m in shown["memories"]]
        read = stack.memory("read_memory", {"memory_id": deploy})
        assert read["surfaced_path"]["reinforced"] and not read["surfaced_path"]["associated"]


def test_hub_keys_learn_less_than_specific_keys(running: FullStack) -> None:
    """Growth is scaled by the key's specificity: "gravity" (2 of 8 memories) grows less than
    "Newton" (1 of 8) on the same read; a key on every memory would not grow at all."""
    newton = running.ids["newton"]
    before = weights(running, newton)
    surface(running)
    running.memory("read_memory", {"memory_id": newton})
    after = weights(running, newton)
    ceiling = PATH_CEILING_FACTOR * 1.0
    assert after["Newton"] - before["Newton"] == pytest.approx(
        PATH_GROWTH_RATE * (ceiling - before["Newton"]), abs=1e-4
    )
    assert after["gravity"] - before["gravity"] == pytest.approx(
        PATH_GROWTH_RATE * specificity(2, 8) * (ceiling - before["gravity"]), abs=1e-4
    )
    assert specificity(8, 8) == 0.0 and specificity(1, 8) == 1.0


def test_a_read_wires_the_prompts_specific_key_to_the_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fire together, wire together (with ``KEYMEM_LEARN_ASSOCIATE``): a prompt's key that
    surfaced with a memory the agent then read gains a learned link, so a later, differently
    worded prompt that names only that key reaches the memory, which it could not before."""
    monkeypatch.setenv("KEYMEM_LEARN_ASSOCIATE", "true")
    with full_stack(tmp_path) as stack:
        deploy = stack.remember(DEPLOY, ["deploy window", "Tuesday"])
        freeze = stack.remember(FREEZE, ["release freeze"])
        for content, keys in FILLERS:
            stack.remember(content, keys)
        stack.search("release freeze", top_k=1)
        freeze_key = stack.client.call("graph", "memory_keys", {"memory_ids": [freeze]})[
            "memories"
        ][freeze][0]["key_id"]
        later = "Is there anything I should know about the release freeze?"

        def deploy_rank() -> tuple[int, list[str]]:
            found = stack.search(later)["memories"]
            rank = next(i for i, m in enumerate(found) if m["memory_id"] == deploy)
            return rank, found[rank]["matched_keys"]

        rank_before, keys_before = deploy_rank()
        assert freeze_key not in keys_before

        shown = stack.memory("inject", {"prompt": TRAIN_PROMPT})
        assert deploy in [m["id"] for m in shown["memories"]]
        read = stack.memory("read_memory", {"memory_id": deploy})
        associated = read["surfaced_path"]["associated"]
        assert {row["memory_id"] for row in associated} == {deploy}
        assert freeze_key in {row["key_id"] for row in associated}
        assert all(row["weight"] == pytest.approx(LEARNED_LINK_WEIGHT) for row in associated)

        rank_after, keys_after = deploy_rank()
        assert freeze_key in keys_after
        assert rank_after < rank_before


def test_learned_links_are_capped_per_memory_also_after_a_restart(tmp_path: Path) -> None:
    """However many prompts' keys a memory is read under, it holds at most
    ``LEARNED_MAX_PER_MEMORY`` learned links, and a key at most ``LEARNED_MAX_PER_KEY``; the
    file knows which links were learned, so a restart does not lift the caps, and learned
    links never count as a key's memories (its IDF stays that of the memories written with it).
    """

    def associate(stack: FullStack, newton: str, key_ids: list[str]) -> int:
        made = 0
        for at in range(0, len(key_ids), 3):
            body = {"namespace": "default", "hit": newton, "keys": [], "associate": []}
            body["associate"] = key_ids[at : at + 3]
            made += len(stack.client.call("graph", "reinforce_path", body)["associated"])
        return made

    topics = [f"topic{i}" for i in range(16)]
    with full_stack(tmp_path) as stack:
        newton = stack.remember(NEWTON, ["Newton", "gravity", "apple"])
        held = [
            stack.remember(f"Filler fact number {i} about {t}", [t]) for i, t in enumerate(topics)
        ]
        key_ids = [
            stack.client.call("graph", "memory_keys", {"memory_ids": [m]})["memories"][m][0][
                "key_id"
            ]
            for m in held
        ]
        assert associate(stack, newton, key_ids[:12]) == LEARNED_MAX_PER_MEMORY
        assert len(weights(stack, newton)) == 3 + LEARNED_MAX_PER_MEMORY
    with full_stack(tmp_path) as stack:
        assert associate(stack, newton, key_ids[12:]) == 0
        assert len(weights(stack, newton)) == 3 + LEARNED_MAX_PER_MEMORY
        made = 0
        for other in held[1:]:
            body = {"namespace": "default", "hit": other, "keys": [], "associate": key_ids[:1]}
            made += len(stack.client.call("graph", "reinforce_path", body)["associated"])
        assert made == LEARNED_MAX_PER_KEY - 1  # its first learned link went to Newton
        rows = stack.client.call("graph", "memory_keys", {"memory_ids": held[:1]})
        assert rows["memories"][held[0]][0]["memory_count"] == 1


def test_bad_association_input_is_refused_and_changes_nothing(running: FullStack) -> None:
    newton = running.ids["newton"]
    other = running.remember("A fact in another namespace", ["elsewhere"], namespace="other")
    body = {"memory_ids": [other], "namespace": "other"}
    reply = running.client.call("graph", "memory_keys", body)
    foreign = reply["memories"][other][0]["key_id"]
    before = weights(running, newton)
    bad = [
        ({"namespace": "default", "hit": newton, "keys": [], "associate": [foreign]}, BadRequest),
        ({"namespace": "default", "hit": newton, "keys": [], "associate": "k"}, BadRequest),
        ({"namespace": "default", "hit": newton, "keys": [], "associate": [7]}, BadRequest),
        ({"namespace": "other", "hit": newton, "keys": [], "associate": [foreign]}, NotFound),
    ]
    for body, error in bad:
        with pytest.raises(error):
            running.client.call("graph", "reinforce_path", body)
    assert weights(running, newton) == before


def test_an_export_from_before_learned_links_still_imports(tmp_path: Path) -> None:
    """Schema 3 added ``links.learned``; an export written before it imports with every link
    not learned (store/portable.py)."""
    graph = open_graph(tmp_path / "a")
    try:
        graph.remember(remember_body("Dana prefers tabs", ["Dana", "indentation"]))
    finally:
        graph.close()
    conn = duckdb.connect(str(tmp_path / "a" / GRAPH_FILE), read_only=True)
    try:
        export_graph(conn, tmp_path / "new.json")
    finally:
        conn.close()
    document = read_export(tmp_path / "new.json")
    links = document["tables"]["links"]
    assert links["columns"][-1] == "learned"
    links["columns"] = links["columns"][:-1]  # as schema 2 wrote it
    links["rows"] = [row[:-1] for row in links["rows"]]
    target = GraphStore(tmp_path / "b" / GRAPH_FILE)
    try:
        assert import_graph(target, document)["links"] == 2
        rows = target.conn.execute("SELECT learned FROM links").fetchall()
    finally:
        target.close()
    assert rows == [(False,), (False,)]
