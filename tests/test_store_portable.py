"""Backups, export and import: what a user relies on when moving or restoring their memory."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest

from keymem.protocol.errors import Conflict
from keymem.services.cli import main
from keymem.store.backup import backup_dir, take_backup
from keymem.store.database import GraphStore
from keymem.store.portable import export_graph, import_graph, read_export
from keymem.store.schema import SCHEMA_VERSION, DamagedMeta, migrate
from tests.graph_helpers import GRAPH_FILE, open_graph, table_counts
from tests.vectors import remember_body


def _populate(home: Path) -> dict[str, str]:
    graph = open_graph(home)
    try:
        first = graph.remember(
            remember_body(
                "Dana prefers tabs",
                ["Dana", "indentation"],
                key_types={"Dana": "name"},
                source={"session": "s1"},
            )
        )["saved"]
        graph.remember(remember_body("커피는 하루 두 잔", ["coffee", "커피"], namespace="health"))
        fixed = graph.correct({"memory_id": first, "content": "Dana prefers spaces now"})
        graph.remember(remember_body("Linked fact", ["indentation"], related_to=[fixed["new_id"]]))
        dana = graph.state.indexes["default"].exact["dana"]
        graph.read_memory({"memory_id": fixed["new_id"], "via_key_id": dana})
        graph.confirm_memory({"memory_id": fixed["new_id"], "evidence": "user"})
        return {"first": first, "current": fixed["new_id"]}
    finally:
        graph.close()


def _export(home: Path, out: Path) -> dict[str, object]:
    conn = duckdb.connect(str(home / GRAPH_FILE), read_only=True)
    try:
        export_graph(conn, out)
    finally:
        conn.close()
    return read_export(out)


def test_export_import_export_round_trips_everything(tmp_path: Path) -> None:
    ids = _populate(tmp_path / "a")
    first = _export(tmp_path / "a", tmp_path / "one.json")
    target = GraphStore(tmp_path / "b" / GRAPH_FILE)
    try:
        added = import_graph(target, first)
    finally:
        target.close()
    assert added["memories"] == 4 and added["events"] == 3  # active memories enter the feed
    second = _export(tmp_path / "b", tmp_path / "two.json")
    assert second["tables"] == first["tables"]
    assert second["meta"] == first["meta"] == {"dim": "512"}
    graph = open_graph(tmp_path / "b")  # and the imported graph works like the original
    try:
        history = graph.history({"memory_id": ids["first"]})["versions"]
        assert [v["id"] for v in history] == [ids["first"], ids["current"]]
        current = graph.get_memories({"ids": [ids["current"]]})["memories"][0]
        assert current["depth"] == 0.05 and current["access_count"] == 1
        assert graph.match_keys({"text": "what does Dana like"})["keys"][0]["concept"] == "Dana"
        original = open_graph(tmp_path / "a")
        try:
            vectors_a = {k: v.vector for k, v in original.state.keys.items()}
        finally:
            original.close()
        for key_id, key in graph.state.keys.items():
            assert np.array_equal(key.vector, vectors_a[key_id])
    finally:
        graph.close()


def test_import_skips_existing_ids_and_export_never_overwrites(tmp_path: Path) -> None:
    _populate(tmp_path / "a")
    document = _export(tmp_path / "a", tmp_path / "dump.json")
    store = GraphStore(tmp_path / "a" / GRAPH_FILE)
    try:
        again = import_graph(store, document)
    finally:
        store.close()
    assert all(count == 0 for count in again.values())
    before = (tmp_path / "dump.json").read_bytes()
    with pytest.raises(FileExistsError):
        _export(tmp_path / "a", tmp_path / "dump.json")
    assert (tmp_path / "dump.json").read_bytes() == before


def test_import_refuses_another_vector_space_and_writes_nothing(tmp_path: Path) -> None:
    _populate(tmp_path / "a")
    document = _export(tmp_path / "a", tmp_path / "dump.json")
    document["meta"] = {"dim": "768"}
    other = open_graph(tmp_path / "b")
    other.remember(remember_body("already here", ["here"]))
    other.close()
    before = table_counts(tmp_path / "b" / GRAPH_FILE)
    store = GraphStore(tmp_path / "b" / GRAPH_FILE)
    try:
        with pytest.raises(Conflict):
            import_graph(store, document)
    finally:
        store.close()
    assert table_counts(tmp_path / "b" / GRAPH_FILE) == before


def test_backups_are_consistent_and_rotated(tmp_path: Path) -> None:
    _populate(tmp_path)
    store = GraphStore(tmp_path / GRAPH_FILE)
    try:
        made = [take_backup(store, backup_dir(tmp_path), keep=2) for _ in range(4)]
    finally:
        store.close()
    kept = sorted(backup_dir(tmp_path).glob("graph-*.duckdb"))
    assert kept == made[-2:]
    assert table_counts(kept[-1]) == table_counts(tmp_path / GRAPH_FILE)
    live, restored = GraphStore(tmp_path / GRAPH_FILE), GraphStore(kept[-1])
    try:  # a restored backup is another history: feed subscribers must re-snapshot
        assert live.read_meta()["epoch"] != restored.read_meta()["epoch"]
        assert live.load().memories.keys() == restored.load().memories.keys()
    finally:
        live.close()
        restored.close()


def test_cli_export_then_import_into_an_empty_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _populate(tmp_path / "a")
    monkeypatch.setenv("KEYMEM_HOME", str(tmp_path / "a"))
    out = tmp_path / "cli.json"
    assert main(["export", str(out)]) == 0
    assert main(["export", str(out)]) == 1  # refuses to overwrite
    assert main(["backup", "--keep", "1"]) == 0
    monkeypatch.setenv("KEYMEM_HOME", str(tmp_path / "b"))
    assert main(["import", str(out)]) == 0
    assert "imported 4 memories" in capsys.readouterr().out
    assert (
        table_counts(tmp_path / "b" / GRAPH_FILE)["links"]
        == table_counts(tmp_path / "a" / GRAPH_FILE)["links"]
    )
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"format": "something else"}))
    assert main(["import", str(broken)]) == 1


def test_migrations_upgrade_old_files_and_refuse_newer_ones(tmp_path: Path) -> None:
    path = tmp_path / GRAPH_FILE
    conn = duckdb.connect(str(path))
    assert migrate(conn) == 0  # an empty file starts at version 0
    assert migrate(conn) == SCHEMA_VERSION  # and is not migrated twice
    conn.execute(
        "UPDATE meta SET value = ? WHERE name = 'schema_version'", [str(SCHEMA_VERSION + 1)]
    )
    conn.close()
    with pytest.raises(Conflict, match="newer"):
        GraphStore(path)


def test_a_file_from_before_learned_links_opens_with_every_link_kept(tmp_path: Path) -> None:
    """A user's schema-2 graph file (no ``links.learned``) upgrades in place on start."""
    ids = _populate(tmp_path)
    path = tmp_path / GRAPH_FILE
    conn = duckdb.connect(str(path))
    links_before = conn.execute("SELECT count(*) FROM links").fetchone()
    conn.execute("ALTER TABLE links DROP COLUMN learned")
    conn.execute("DROP TABLE write_outcomes")
    conn.execute("DROP TABLE near_duplicates")
    conn.execute("DROP TABLE memory_vectors")
    for column in ("outcome_key", "outcome_method", "outcome_result"):
        conn.execute(f"ALTER TABLE events DROP COLUMN {column}")
    conn.execute("UPDATE meta SET value = '2' WHERE name = 'schema_version'")
    conn.close()
    store = GraphStore(path)
    try:
        loaded = store.load()
        assert ids["current"] in loaded.memories
    finally:
        store.close()
    conn = duckdb.connect(str(path), read_only=True)
    try:
        assert conn.execute("SELECT count(*) FROM links").fetchone() == links_before
        assert conn.execute("SELECT count(*) FROM links WHERE learned").fetchone() == (0,)
        version = conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
        assert version == (str(SCHEMA_VERSION),)
    finally:
        conn.close()


def test_a_service_backup_runs_beside_writes(tmp_path: Path) -> None:
    ids = _populate(tmp_path)
    graph = open_graph(tmp_path)
    try:
        started = graph.backup({"keep": 3})
        assert started["status"] in ("running", "done")
        during = graph.remember(remember_body("written while the copy runs", ["during"]))
        graph.wait_for_backup()
        finished = graph.backup_status({})
        assert finished["status"] == "done" and finished["error"] is None
        assert graph.get_memories({"ids": [during["saved"]]})["missing"] == []
    finally:
        graph.close()
    copy = GraphStore(Path(finished["path"]))
    try:
        assert ids["current"] in copy.load().memories
    finally:
        copy.close()


@pytest.mark.parametrize(("row", "value"), [("pruned_through", "garbage"), ("schema_version", "x")])
def test_exporting_a_damaged_file_is_a_typed_refusal_that_writes_nothing(
    tmp_path: Path, row: str, value: str
) -> None:
    """`keymem export` reads a snapshot when the services hold the file: a meta number damaged
    outside keymem is refused by name, not a bare ValueError, and no export file appears."""
    _populate(tmp_path / "a")
    conn = duckdb.connect(str(tmp_path / "a" / GRAPH_FILE))
    try:
        conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [row, value])
    finally:
        conn.close()
    out = tmp_path / "out.json"
    with pytest.raises(DamagedMeta) as refused:
        _export(tmp_path / "a", out)
    assert refused.value.detail == {"row": row, "value": value}
    assert not out.exists() and not out.with_name(out.name + ".partial").exists()
