"""What `keymem list`, `stats` and `namespaces drop` ask of the graph: a namespace's memories a
page at a time, its sizes in detail, and dropping it whole, on a real DuckDB file. A namespace
is a boundary: none of them reaches into another namespace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from keymem.protocol.errors import BadRequest
from keymem.services.graph import GraphService
from tests.graph_helpers import GRAPH_FILE, open_graph, table_counts
from tests.vectors import remember_body


@pytest.fixture
def graph(tmp_path: Path) -> Iterator[GraphService]:
    service = open_graph(tmp_path)
    yield service
    service.close()


def fill(graph: GraphService) -> dict[str, str]:
    ids = {
        "old": graph.remember(remember_body("The shop deploys on Fridays", ["deploy", "friday"]))[
            "saved"
        ],
        "shop": graph.remember(
            remember_body("The shop uses PostgreSQL 16", ["postgres", "database"], namespace="shop")
        )["saved"],
    }
    ids["new"] = graph.correct({"memory_id": ids["old"], "content": "The shop deploys on Mondays"})[
        "new_id"
    ]
    for n in range(3):
        graph.remember(
            remember_body(
                f"Shop fact number {n} about the database",
                ["database", f"fact {n}"],
                namespace="shop",
            )
        )
    return ids


def test_list_memories_pages_one_namespace_newest_first(graph: GraphService) -> None:
    ids = fill(graph)
    first = graph.list_memories({"namespace": "shop", "limit": 3, "max_chars": 10})
    assert first["total"] == 4 and first["next_offset"] == 3
    assert first["memories"][0]["content"] == "Shop fact "  # the newest, cut to 10
    assert first["memories"][0]["content_chars"] > 10
    rest = graph.list_memories({"namespace": "shop", "offset": 3})
    assert [m["id"] for m in rest["memories"]] == [ids["shop"]] and rest["next_offset"] is None
    assert "database" in rest["memories"][0]["keys"]
    default = graph.list_memories({})
    assert [m["id"] for m in default["memories"]] == [ids["new"]]  # not the superseded one
    everything = graph.list_memories({"include_inactive": True})
    assert {m["id"] for m in everything["memories"]} == {ids["new"], ids["old"]}


def test_counts_in_detail_count_hubs_stale_and_bytes_per_namespace(graph: GraphService) -> None:
    fill(graph)
    plain = graph.counts({})
    assert "hubs" not in plain["namespaces"]["shop"]
    detail = graph.counts({"detail": True})
    shop = detail["namespaces"]["shop"]
    assert shop["memories"] == 4 and shop["hubs"] == 1  # "database" holds all four
    assert detail["namespaces"]["default"]["hubs"] == 0
    assert shop["stale"] == 0
    dim = graph.state.dim or 0
    assert shop["bytes"] > shop["keys"] * dim * 4 > 0
    memory = next(m for m in graph.state.memories.values() if m.namespace == "shop")
    memory.last_confirmed_at -= 400 * 86_400  # standard profile: stale after ~270 days
    assert graph.counts({"detail": True})["namespaces"]["shop"]["stale"] == 1


def test_drop_namespace_deletes_it_whole_and_nothing_else(tmp_path: Path) -> None:
    graph = open_graph(tmp_path)
    try:
        ids = fill(graph)
        before = graph.counts({})["namespaces"]["default"]
        dropped = graph.drop_namespace({"namespace": " Shop "})
        assert dropped["namespace"] == "shop" and dropped["keys"] == 5
        assert dropped["memories"] == dropped["versions"] == 4
        after = graph.counts({})
        assert "shop" not in after["namespaces"] and after["namespaces"]["default"] == before
        assert graph.get_memories({"ids": [ids["new"]]})["memories"]
        events = graph.feed_since({"seq": 0, "limit": 100})["events"]
        assert ids["shop"] in {e["id"] for e in events if e["op"] == "delete"}
    finally:
        graph.close()
    on_disk = table_counts(tmp_path / GRAPH_FILE)
    assert on_disk["memories"] == 2 and on_disk["keys"] == 2  # default's versions and keys
    reopened = open_graph(tmp_path)
    try:
        assert "shop" not in reopened.counts({})["namespaces"]
    finally:
        reopened.close()


@pytest.mark.parametrize("body", [{}, {"namespace": "  "}, {"namespace": 3}])
def test_drop_namespace_must_be_named_and_changes_nothing_otherwise(
    graph: GraphService, body: dict[str, object]
) -> None:
    fill(graph)
    before = graph.counts({})
    with pytest.raises(BadRequest):
        graph.drop_namespace(body)
    assert graph.counts({}) == before
