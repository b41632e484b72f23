"""Learning from the hook's traffic: a surfaced memory that is then read grows its path.

Real services in one process (tests/full_stack.py): inject through the memory service, read
through it, and weights read back from the graph.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.graph.feedback import PATH_CEILING_FACTOR, PATH_GROWTH_RATE
from services.router.learning import SurfacedLog, Surfacing
from tests.full_stack import FullStack, full_stack

NEWTON = "Newton discovered gravity when an apple fell on his head"
EINSTEIN = "Einstein explained gravity as the curvature of spacetime"
PROMPT = "What did Newton discover about gravity when the apple fell?"


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
    learned = weights(running, einstein)["gravity"]
    assert learned > 1.0
    surfaced = surface(running)
    assert newton in surfaced
    read = running.memory("read_memory", {"memory_id": newton})
    decayed = weights(running, einstein)["gravity"]
    assert einstein in {row["memory_id"] for row in read["surfaced_path"]["decayed"]}
    assert 1.0 <= decayed < learned
    assert weights(running, einstein)["Einstein"] == pytest.approx(learned)  # not on the path


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
