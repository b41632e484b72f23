"""Sleep (services/graph/sleep.py) on a real graph file: guards, merges, decay, flags, backup,
dry run, journal, and ``keymem sleep`` as a real process on a home whose keymem is down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from keymem.protocol.errors import BadRequest
from keymem.services import config as cfg
from keymem.services.graph import GraphService
from keymem.services.graph.feedback import LEARNED_LINK_WEIGHT
from keymem.services.graph.profile import KeyProfile
from keymem.services.graph.siblings import siblings
from keymem.services.graph.sleep import HALF_LIFE_DAYS
from keymem.services.journal import read_events
from keymem.store.backup import backup_dir
from keymem.store.database import GraphStore
from tests.graph_helpers import GRAPH_FILE, key_id_of, open_graph, table_counts
from tests.vectors import DIM, FINGERPRINT, vectors

DAY_S = 86_400.0
NO_WRITE_MERGES = {"key_merge": 0.0, "short_key_merge": 0.0}
SAME = np.random.default_rng(7).standard_normal(DIM).astype(np.float32)
SAME /= np.linalg.norm(SAME)


def remember(
    graph: GraphService,
    content: str,
    keys: list[str],
    *,
    same_vector: bool = False,
    key_types: dict[str, str] | None = None,
) -> str:
    """Save a memory; with ``same_vector`` every key gets one vector (cosine 1: only a guard
    can keep such keys apart)."""
    key_vectors = np.stack([SAME] * len(keys)) if same_vector else vectors(keys)
    body: dict[str, Any] = {
        "content": content,
        "keys": keys,
        "key_vectors": key_vectors,
        "fingerprint": FINGERPRINT,
    }
    if key_types:
        body["key_types"] = key_types
    saved: str = graph.remember(body)["saved"]
    return saved


def open_unmerging(home: Path) -> GraphService:
    """A graph that merges no key on write (as a store written under other thresholds, or
    imported, may hold): what sleep then merges or keeps apart is sleep's doing."""
    return GraphService(home / GRAPH_FILE, KeyProfile(overrides=NO_WRITE_MERGES))


def run_sleep(graph: GraphService, *, dry_run: bool = False, now: float | None = None) -> Any:
    graph.start_sleep(dry_run, now)
    graph.wait_for_backup()
    running = graph.sleep_pass
    assert running is not None
    while not running.done:
        graph.sleep_tick()
    return running.report.to_wire()


def concepts(graph: GraphService) -> set[str]:
    return {key.concept for key in graph.state.keys.values()}


SIBLING_PAIRS = [
    ("Room 101", "Room 102"),  # numbers
    ("v0.6.1", "v0.6.2"),  # versions
    ("release 2024-05-01", "release 2024-05-02"),  # dates
    ("Monday standup", "Tuesday standup"),  # weekdays
    ("March report", "April report"),  # months
    ("Agent A", "Agent B"),  # one-letter labels
    ("three kids", "four kids"),  # number words
]


@pytest.mark.parametrize(("a", "b"), SIBLING_PAIRS)
def test_the_write_path_never_merges_siblings(tmp_path: Path, a: str, b: str) -> None:
    graph = open_graph(tmp_path)  # the shipped thresholds
    try:
        remember(graph, "note about the schedule", [a], same_vector=True)
        remember(graph, "another note about the schedule", [b], same_vector=True)
        assert key_id_of(graph, a) != key_id_of(graph, b)
    finally:
        graph.close()


def test_the_write_path_merges_one_vector_under_two_names(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    try:
        remember(graph, "a note about the schedule", ["schedule"], same_vector=True)
        remember(graph, "a note about the plan", ["plan"], same_vector=True)
        assert key_id_of(graph, "schedule") == key_id_of(graph, "plan")
    finally:
        graph.close()


@pytest.mark.parametrize(("a", "b"), SIBLING_PAIRS)
def test_siblings_with_one_vector_and_the_same_memories_stay_apart(
    tmp_path: Path, a: str, b: str
) -> None:
    assert siblings(a, b)
    graph = open_unmerging(tmp_path)
    try:
        for i in range(3):
            remember(graph, f"note {i} about the schedule", [a, b], same_vector=True)
    finally:
        graph.close()
    graph = open_graph(tmp_path)
    try:
        report = run_sleep(graph)
        assert report["merged_keys"] == 0
        assert {a, b} <= concepts(graph)
    finally:
        graph.close()


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("C style", "C# style"),
        ("C style", "C++ style"),
        ("R&D", "RD"),
        ("Romeo + Juliet", "Romeo × Juliet"),
    ],
)
def test_keys_a_symbol_tells_apart_are_not_one_form(tmp_path: Path, a: str, b: str) -> None:
    graph = open_unmerging(tmp_path)
    try:
        remember(graph, "the first note of the project", [a])
        remember(graph, "the second note of the project", [b])
        assert run_sleep(graph)["merged_keys"] == 0
        assert {a, b} <= concepts(graph)
    finally:
        graph.close()


def test_names_merge_only_by_form_never_by_vector(tmp_path: Path) -> None:
    graph = open_unmerging(tmp_path)
    try:
        names = {"Alice": "name", "Alicia": "name"}
        for i in range(3):
            remember(
                graph, f"lunch {i} with the team", list(names), same_vector=True, key_types=names
            )
        assert run_sleep(graph)["merged_keys"] == 0
        assert {"Alice", "Alicia"} <= concepts(graph)
    finally:
        graph.close()


def test_one_concept_merges_by_form_and_by_vector_and_stays_merged(tmp_path: Path) -> None:
    graph = open_unmerging(tmp_path)
    try:
        first = remember(graph, "the invoice goes out by e-mail", ["e-mail", "invoice"])
        second = remember(graph, "send the receipt by email", ["email", "receipt"])
        car = remember(
            graph, "the car is parked downstairs", ["car", "automobile"], same_vector=True
        )
        graph.read_memory({"memory_id": first, "via_key_id": key_id_of(graph, "e-mail")})
    finally:
        graph.close()
    graph = open_graph(tmp_path)
    try:
        report = run_sleep(graph)
        assert report["merged_keys"] == 2
        assert {(m["reason"]) for m in report["merges"]} == {"form", "vector"}
    finally:
        graph.close()
    graph = open_graph(tmp_path)  # what the file holds after a restart
    try:
        email = key_id_of(graph, "email")
        assert key_id_of(graph, "e-mail") == email
        assert key_id_of(graph, "automobile") == key_id_of(graph, "car")
        read, other = graph.state.link(email, first), graph.state.link(email, second)
        assert read is not None and other is not None
        # the read strengthened "e-mail"'s link; the stronger weight survives the merge
        assert read.weight > 1.0
        view = graph.read_memory({"memory_id": car})["memory"]
        assert len(view["keys"]) == 1
        assert {view["keys"][0]["concept"], *view["keys"][0]["aliases"]} == {"car", "automobile"}
    finally:
        graph.close()


def test_unused_learning_decays_by_its_half_life_and_used_or_dismissed_links_stay(
    tmp_path: Path,
) -> None:
    graph = open_graph(tmp_path)
    try:
        unused = remember(graph, "the boiler is serviced in October", ["boiler", "heating"])
        used = remember(graph, "the heat pump needs a filter", ["heat pump", "filter"])
        dismissed = remember(graph, "the radiator valve sticks", ["radiator", "valve"])
        boiler, pump, valve = (key_id_of(graph, k) for k in ("boiler", "heat pump", "valve"))
        for _ in range(5):
            graph.read_memory({"memory_id": unused, "via_key_id": boiler})
            graph.read_memory({"memory_id": used, "via_key_id": pump})
        graph.dismiss({"memory_id": dismissed, "key_id": valve})
        graph.reinforce_path(
            {"hit": unused, "keys": [boiler], "associate": [key_id_of(graph, "radiator")]}
        )
        learned = graph.state.link(key_id_of(graph, "radiator"), unused)
        assert learned is not None and learned.learned
        first = run_sleep(graph)  # every read so far was "since the last pass": nothing decays
        assert first["decayed_links"] == 0
        graph.read_memory({"memory_id": used, "via_key_id": pump})
        weights = {
            "unused": graph.state.link(boiler, unused).weight,  # type: ignore[union-attr]
            "used": graph.state.link(pump, used).weight,  # type: ignore[union-attr]
            "dismissed": graph.state.link(valve, dismissed).weight,  # type: ignore[union-attr]
        }
        later = time.time() + HALF_LIFE_DAYS * DAY_S  # one half-life of not being read
        second = run_sleep(graph, now=later)
        assert second["decayed_links"] == 2  # the boiler link and the learned association
    finally:
        graph.close()
    graph = open_graph(tmp_path)
    try:
        decayed = graph.state.link(boiler, unused)
        assert decayed is not None
        assert decayed.weight == pytest.approx(1.0 + (weights["unused"] - 1.0) / 2, abs=0.01)
        assert graph.state.link(pump, used).weight == weights["used"]  # type: ignore[union-attr]
        kept = graph.state.link(valve, dismissed)
        assert kept is not None and kept.weight == weights["dismissed"] < 1.0
        association = graph.state.link(key_id_of(graph, "radiator"), unused)
        assert association is not None
        assert association.weight == pytest.approx(0.1 + (LEARNED_LINK_WEIGHT - 0.1) / 2, abs=0.01)
    finally:
        graph.close()


def test_contradictions_and_near_duplicates_are_flagged_never_deleted(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    try:
        tuesday = remember(graph, "Alice's flight to Lisbon leaves on Tuesday", ["flight", "Alice"])
        thursday = remember(graph, "Alice's flight to Lisbon leaves on Thursday", ["flight"])
        vscode = remember(graph, "Bob prefers dark mode in VS Code", ["editor"])
        again = remember(graph, "Bob prefers the dark mode in VS Code", ["theme"])
        other = remember(graph, "Carol prefers light mode in the terminal", ["terminal"])
        for room in range(10):  # one pattern many times over: a template, not a contradiction
            remember(graph, f"meeting room {room} is booked all day", ["booking"])
        report = run_sleep(graph)
        assert (report["contradictions"], report["near_duplicates"]) == (1, 1)
        assert len(graph.state.memories) == 15
    finally:
        graph.close()
    graph = open_graph(tmp_path)
    try:
        views = {
            m["id"]: m
            for m in graph.get_memories({"ids": [tuesday, thursday, vscode, again, other]})[
                "memories"
            ]
        }
        assert views[tuesday]["contradicts"] == [thursday]
        assert views[thursday]["contradicts"] == [tuesday]
        assert views[vscode]["near_duplicates"] == [again]
        assert views[again]["near_duplicates"] == [vscode]
        assert views[other]["near_duplicates"] == views[other]["contradicts"] == []
        assert all(view["active"] for view in views.values())
        assert run_sleep(graph)["contradictions"] == 0  # flagged once
        graph.forget({"memory_id": thursday})
        view = graph.get_memories({"ids": [tuesday]})["memories"][0]
        assert view["contradicts"] == []
    finally:
        graph.close()


def test_a_backup_comes_first_holds_the_graph_before_the_pass_and_stays_bounded(
    tmp_path: Path,
) -> None:
    graph = open_graph(tmp_path)
    try:
        remember(graph, "the invoice goes out by e-mail", ["e-mail"])
        remember(graph, "send the receipt by email", ["email"])
        report = run_sleep(graph)
        assert report["merged_keys"] == 1
        store = GraphStore(Path(report["backup"]))
        try:
            before = {key.concept for key in store.load().keys.values()}
        finally:
            store.close()
        assert {"e-mail", "email"} <= before
        for _ in range(6):
            run_sleep(graph)
    finally:
        graph.close()
    assert len(list(backup_dir(tmp_path).glob("graph-*.duckdb"))) == 5


def test_a_dry_run_reports_the_same_and_changes_nothing(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    try:
        remember(graph, "the invoice goes out by e-mail", ["e-mail"])
        remember(graph, "send the receipt by email", ["email"])
        remember(graph, "Bob prefers dark mode in VS Code", ["editor"])
        remember(graph, "Bob prefers the dark mode in VS Code", ["theme"])
    finally:
        graph.close()
    before = table_counts(tmp_path / GRAPH_FILE)
    graph = open_graph(tmp_path)
    try:
        with pytest.raises(BadRequest):
            graph.sleep({"dry_run": "yes"})
        assert graph.sleep_status({}) == {"status": "none"}
        planned = run_sleep(graph, dry_run=True)
    finally:
        graph.close()
    assert table_counts(tmp_path / GRAPH_FILE) == before
    assert not backup_dir(tmp_path).exists() or not list(backup_dir(tmp_path).iterdir())
    graph = open_graph(tmp_path)
    try:
        done = run_sleep(graph)
    finally:
        graph.close()
    counted = ("merged_keys", "near_duplicates", "contradictions", "decayed_links")
    assert [planned[c] for c in counted] == [done[c] for c in counted] == [1, 1, 0, 0]
    assert planned["backup"] is None and done["backup"] is not None


def test_writes_between_slices_are_served_and_kept(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    try:
        for i in range(40):
            remember(graph, f"note {i}: the e-mail server", ["e-mail", f"topic {i}"])
        remember(graph, "one more about email", ["email"])
        graph.start_sleep(False)
        graph.wait_for_backup()
        running = graph.sleep_pass
        assert running is not None
        written: list[str] = []
        while not running.done:
            running.advance(lambda batch: graph.write(lambda _: batch, None), budget_s=0.0)
            written.append(remember(graph, f"written mid-pass {len(written)}", ["email"]))
        assert running.report.status == "done" and running.report.merged_keys == 1
    finally:
        graph.close()
    graph = open_graph(tmp_path)
    try:
        email = key_id_of(graph, "email")
        assert key_id_of(graph, "e-mail") == email
        assert all(graph.state.link(email, m) is not None for m in written)
    finally:
        graph.close()


def test_the_pass_is_journalled_once_with_its_counts(tmp_path: Path) -> None:
    started = time.time()
    graph = open_graph(tmp_path)
    try:
        remember(graph, "the invoice goes out by e-mail", ["e-mail"])
        remember(graph, "send the receipt by email", ["email"])
        run_sleep(graph)
    finally:
        graph.close()
    slept = [e for e in read_events(tmp_path, started - 1) if e["kind"] == "sleep"]
    assert len(slept) == 1
    assert slept[0]["merged_keys"] == 1 and slept[0]["dry_run"] is False


def _keymem(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KEYMEM_HOME": str(home), "COLUMNS": "100"}
    return subprocess.run(
        [sys.executable, "-m", "keymem.services.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_keymem_sleep_runs_on_the_file_when_keymem_is_down(tmp_path: Path) -> None:
    missing = _keymem(tmp_path, "sleep")
    assert missing.returncode == 1 and "no graph" in missing.stderr
    graph = open_graph(tmp_path)
    try:
        remember(graph, "the invoice goes out by e-mail", ["e-mail"])
        remember(graph, "send the receipt by email", ["email"])
    finally:
        graph.close()
    dry = _keymem(tmp_path, "sleep", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["merged_keys"] == 1
    done = _keymem(tmp_path, "sleep")
    assert done.returncode == 0, done.stderr
    assert "merged keys" in done.stdout and "e-mail" in done.stdout
    assert max(len(line) for line in done.stdout.splitlines()) <= 100
    again = json.loads(_keymem(tmp_path, "sleep", "--json").stdout)
    assert again["merged_keys"] == 0 and again["status"] == "done"


@pytest.mark.parametrize(
    ("configured", "starts"),
    [
        ({}, False),
        ({"KEYMEM_SLEEP_INTERVAL_H": "1"}, True),
        ({"KEYMEM_SLEEP_INTERVAL_H": "0"}, False),
    ],
)
def test_the_schedule_starts_a_pass_once_its_interval_has_passed(
    tmp_path: Path, configured: dict[str, str], starts: bool
) -> None:
    interval_h = cfg.load(configured, home=tmp_path)[cfg.SLEEP_INTERVAL_H]
    graph = GraphService(tmp_path / GRAPH_FILE, sleep_interval_h=interval_h)
    try:
        remember(graph, "a note about the schedule", ["schedule"])
        graph.sleep_due()
        assert graph.sleep_pass is None  # the service has only just started
        graph.started_at -= 2 * 3600  # two hours later: past 1 h, not past the default 24 h
        graph.sleep_due()
        assert (graph.sleep_pass is not None) is starts
    finally:
        graph.close()
