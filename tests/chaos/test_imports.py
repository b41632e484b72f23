"""Hostile and damaged imports, and a graph file with a damaged row.

The import table: each case takes a sound export and breaks one thing in it. ``keymem import``
must refuse every one with exit 1 and one line on stderr naming the problem — no traceback —
and leave the target graph exactly as it was. A graph file that already holds a damaged row
must still start: the row is quarantined, logged, and reported (graph ``quarantine``).
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest

from keymem.services.cli import doctor, main
from keymem.services.config import Settings, load
from keymem.store.database import GraphStore
from keymem.store.portable import export_graph
from tests.graph_helpers import GRAPH_FILE, damage_file, open_graph, table_counts
from tests.supervised import Deployment, deployment_env
from tests.vectors import remember_body

Document = dict[str, Any]
UP_TIMEOUT_S = 180  # generous: the suite shares a small box with model loads


def populate(home: Path) -> dict[str, str]:
    graph = open_graph(home)
    try:
        first = graph.remember(remember_body("Dana prefers tabs", ["Dana", "indentation"]))
        fixed = graph.correct({"memory_id": first["saved"], "content": "Dana prefers spaces"})
        other = graph.remember(remember_body("커피는 하루 두 잔", ["coffee"], namespace="health"))
        graph.remember(remember_body("Linked", ["indentation"], related_to=[fixed["new_id"]]))
        return {"first": first["saved"], "current": fixed["new_id"], "health": other["saved"]}
    finally:
        graph.close()


@pytest.fixture(scope="module")
def sound(tmp_path_factory: pytest.TempPathFactory) -> Document:
    """A sound export of a small graph (two namespaces, a correction, a related_to)."""
    home = tmp_path_factory.mktemp("source")
    populate(home)
    out = home / "export.json"
    conn = duckdb.connect(str(home / GRAPH_FILE), read_only=True)
    try:
        export_graph(conn, out)
    finally:
        conn.close()
    document: Document = json.loads(out.read_text())
    return document


def cell(doc: Document, table: str, row: int, column: str) -> tuple[list[Any], int]:
    """The row list and the index of ``column`` in it, to change one cell."""
    part = doc["tables"][table]
    return part["rows"][row], part["columns"].index(column)


def set_cell(table: str, column: str, value: Any, row: int = 0) -> Callable[[Document], None]:
    def change(doc: Document) -> None:
        values, at = cell(doc, table, row, column)
        values[at] = value

    return change


def supersede_loop(doc: Document) -> None:
    memories = doc["tables"]["memories"]
    names = memories["columns"]
    ids = {r[names.index("id")]: r for r in memories["rows"]}
    # the correction chain first -> current, closed into a loop
    for row in ids.values():
        if row[names.index("superseded_by")] is not None:
            head = ids[row[names.index("superseded_by")]]
            head[names.index("superseded_by")] = row[names.index("id")]
            head[names.index("supersedes")] = row[names.index("id")]
            return


def cross_namespace_link(doc: Document) -> None:
    keys = doc["tables"]["keys"]
    namespace_at = keys["columns"].index("namespace")
    health_key = next(r[0] for r in keys["rows"] if r[namespace_at] == "health")
    links = doc["tables"]["links"]
    default_link = next(r for r in links["rows"] if r[0] != health_key)
    default_link[0] = health_key


def duplicate_memory(doc: Document) -> None:
    rows = doc["tables"]["memories"]["rows"]
    rows.append(copy.deepcopy(rows[0]))


def duplicate_link(doc: Document) -> None:
    rows = doc["tables"]["links"]["rows"]
    rows.append(copy.deepcopy(rows[0]))


def short_row(doc: Document) -> None:
    doc["tables"]["memories"]["rows"][0].pop()


def key_vector_of_other_dim(doc: Document) -> None:
    values, at = cell(doc, "keys", 0, "vector")
    values[at] = values[at][:-1]


CASES: dict[str, tuple[Callable[[Document], None], str]] = {
    "tables is a string": (lambda d: d.__setitem__("tables", "all of them"), "no tables object"),
    "a table is a string": (
        lambda d: d["tables"].__setitem__("memories", "rows"),
        "table memories is missing",
    ),
    "a table is missing": (lambda d: d["tables"].pop("links"), "table links is missing"),
    "a row is short": (short_row, "memories row 0: must be a list of"),
    "an id is an integer": (set_cell("memories", "id", 12345), "row 0: id must be a string"),
    "a duplicate id": (duplicate_memory, "appears twice"),
    "a supersede cycle": (supersede_loop, "supersede each other in a loop"),
    "a key vector of another dimension": (key_vector_of_other_dim, "dimension"),
    "1 MB of content": (set_cell("memories", "content", "x" * 1_000_000), "1000000 characters"),
    "an unnormalised namespace": (set_cell("memories", "namespace", " Health"), "not normalised"),
    "NaN depth": (set_cell("memories", "depth", float("nan")), "depth must be a finite number"),
    "depth out of range": (set_cell("memories", "depth", 7.0), "depth must be a finite number in"),
    "a link weight of 1e9": (set_cell("links", "weight", 1e9), "link weight must be"),
    "a link to a memory that does not exist": (
        set_cell("links", "memory_id", "ffffffffffff"),
        "one does not exist",
    ),
    "a link across namespaces": (cross_namespace_link, "links namespace"),
    "a link twice": (duplicate_link, "twice"),
    "related_to a memory that does not exist": (
        set_cell("related", "related_id", "eeeeeeeeeeee"),
        "names memory eeeeeeeeeeee, which does not exist",
    ),
    "a key type nobody knows": (set_cell("keys", "key_type", "villain"), "key_type must be one of"),
    "a boolean that is a string": (set_cell("links", "auto", "yes"), "auto must be true or false"),
    "source that is not JSON": (set_cell("memories", "source", "{oops"), "source must be JSON"),
    "meta dim that disagrees": (lambda d: d["meta"].__setitem__("dim", "3"), "dim"),
}


@pytest.fixture(scope="module")
def target_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed graph that already holds a memory of the same vector space."""
    home = tmp_path_factory.mktemp("target")
    graph = open_graph(home)
    try:
        graph.remember(remember_body("The target's own fact", ["target", "own"]))
    finally:
        graph.close()
    return home


@pytest.fixture
def target(target_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh copy of that home for one import."""
    home = tmp_path / "target"
    shutil.copytree(target_home, home)
    monkeypatch.setenv("KEYMEM_HOME", str(home))
    return home


def refused(path: Path, home: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``keymem import`` on ``path``; assert it refused cleanly and changed nothing."""
    before = table_counts(home / GRAPH_FILE)
    assert main(["import", str(path)]) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert captured.out == ""
    assert table_counts(home / GRAPH_FILE) == before
    return lines[0]


@pytest.mark.parametrize("case", list(CASES))
def test_a_damaged_export_is_refused_in_one_line_with_nothing_written(
    case: str, sound: Document, target: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damage, expected = CASES[case]
    document = copy.deepcopy(sound)
    damage(document)
    path = target.parent / "damaged.json"
    path.write_text(json.dumps(document))
    line = refused(path, target, capsys)
    assert expected in line, line


@pytest.mark.parametrize(
    "text",
    ["{", "[" * 100_000 + "]" * 100_000, '{"format": "something else"}', "\udcff"],
    ids=["not JSON", "nested past the parser", "not an export", "not UTF-8"],
)
def test_an_unreadable_file_is_refused_in_one_line(
    text: str, target: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = target.parent / "unreadable.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    assert "cannot read" in refused(path, target, capsys)


def test_the_sound_export_imports_and_the_graph_starts_on_it(
    sound: Document, target: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = target.parent / "sound.json"
    path.write_text(json.dumps(sound))
    assert main(["import", str(path)]) == 0
    assert "imported 4 memories" in capsys.readouterr().out
    graph = open_graph(target)
    try:
        assert graph.quarantine({})["count"] == 0
        assert len(graph.state.memories) == 5
    finally:
        graph.close()


def test_a_graph_file_with_damaged_rows_starts_and_quarantines_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ids = populate(tmp_path)
    path = tmp_path / GRAPH_FILE
    store = GraphStore(path)
    dana = next(k for k in store.load().keys.values() if k.concept == "Dana")
    store.close()
    damage_file(
        path,
        [
            # a key vector of another dimension: the whole store failed to load on it
            ("UPDATE keys SET vector = ? WHERE id = ?", [b"\0\0\x80?" * 7, dana.id]),
            ("UPDATE memories SET depth = 'NaN'::DOUBLE WHERE id = ?", [ids["health"]]),
            # the correction chain closed into a loop
            ("UPDATE memories SET superseded_by = ? WHERE id = ?", [ids["first"], ids["current"]]),
        ],
    )
    with caplog.at_level("WARNING", logger="keymem.graph"):
        graph = open_graph(tmp_path)
    try:
        report = graph.quarantine({})
        rows = {(q["table"], q["row"]): q["reason"] for q in report["rows"]}
        assert "dimension 7" in rows[("keys", dana.id)]
        assert "depth" in rows[("memories", ids["health"])]
        assert "loops" in rows[("memories", ids["current"])]
        assert "loops" in rows[("memories", ids["first"])]
        assert report["count"] == len(report["rows"])  # and the links of what was taken out
        assert {ids["first"], ids["current"], ids["health"]}.isdisjoint(graph.state.memories)
        assert "quarantined" in caplog.text
        # the rest of the graph serves: the memory not involved is read as before
        (linked,) = [m for m in graph.state.memories if m not in ids.values()]
        assert graph.get_memories({"ids": [linked]})["memories"][0]["content"] == "Linked"
        saved = graph.remember(remember_body("After the damage", ["indentation", "recovery"]))
        assert saved["saved"] in graph.state.memories
    finally:
        graph.close()


@pytest.mark.supervised
def test_keymem_up_starts_on_a_damaged_file_and_doctor_names_the_row(short_home: Path) -> None:
    populate(short_home)
    store = GraphStore(short_home / GRAPH_FILE)
    dana = next(k for k in store.load().keys.values() if k.concept == "Dana")
    store.close()
    damage_file(
        short_home / GRAPH_FILE,
        [("UPDATE keys SET vector = ? WHERE id = ?", [b"\0\0\x80?" * 7, dana.id])],
    )
    env = deployment_env(short_home)
    deployment = Deployment(short_home, env)
    try:
        deployment.keymem("up", "--timeout", str(UP_TIMEOUT_S))
        (check,) = doctor._quarantine(Settings.from_config(load(env)))
        assert check.status == "warn" and dana.id in check.detail and "dimension 7" in check.detail
        assert "quarantined" in (short_home / "logs" / "graph.log").read_text()
    finally:
        deployment.teardown()
