"""The store commands on a real deployment, run as a user runs them: `keymem list`, `show`,
`search`, `forget`, `stats`, `namespaces` (and `drop`), with and without --json, in an 80-column
terminal. A mistake (an unknown id, a drop without --yes) says so and changes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from tests.supervised import Deployment, running_deployment

pytestmark = pytest.mark.supervised

TERMINAL_COLUMNS = 80
STRAWBERRY = "The user likes strawberries more than any other fruit"
POSTGRES = (
    "The shop project runs PostgreSQL 16 with alembic migrations, deployed by a blue-green "
    "switch on Fridays after the integration suite passes on the staging cluster"
)
UNKNOWN_ID = "0123456789ab"


@pytest.fixture(scope="module")
def deployed() -> Iterator[tuple[Deployment, dict[str, str]]]:
    with running_deployment(COLUMNS=str(TERMINAL_COLUMNS)) as deployment:
        with Client(ipc_endpoints(deployment.home).frontend, timeout_ms=30_000) as client:

            def remember(content: str, keys: list[str], namespace: str = "default") -> str:
                body = {"content": content, "keys": keys, "namespace": namespace}
                saved: str = client.call("memory", "remember", body)["saved"]
                return saved

            ids = {
                "strawberry": remember(STRAWBERRY, ["strawberry", "fruit", "user taste"]),
                "postgres": remember(POSTGRES, ["postgres", "database", "deploy"], "shop"),
                "redis": remember("The shop caches sessions in Redis", ["redis", "cache"], "shop"),
                "scratch": remember("A scratch note to drop", ["scratch"], "scratch"),
            }
            ids["valkey"] = client.call(
                "memory",
                "correct",
                {
                    "memory_id": ids["redis"],
                    "content": "The shop caches sessions in Valkey",
                    "namespace": "shop",
                },
            )["new_id"]
        yield deployment, ids


def as_json(deployment: Deployment, *args: str) -> Any:
    return json.loads(deployment.keymem(*args, "--json").stdout)


def assert_fits(text: str) -> None:
    wide = [line for line in text.splitlines() if len(line) > TERMINAL_COLUMNS]
    assert not wide, f"lines wider than {TERMINAL_COLUMNS} columns: {wide}"


def listed_ids(deployment: Deployment) -> set[str]:
    found = as_json(deployment, "list", "--all")["namespaces"]
    return {m["id"] for page in found for m in page["memories"]}


def test_list_shows_each_namespace_newest_first(
    deployed: tuple[Deployment, dict[str, str]],
) -> None:
    deployment, ids = deployed
    pages = {p["namespace"]: p for p in as_json(deployment, "list")["namespaces"]}
    assert set(pages) == {"default", "shop", "scratch"}
    assert [m["id"] for m in pages["shop"]["memories"]] == [ids["valkey"], ids["postgres"]]
    one = as_json(deployment, "list", "-n", "shop", "--limit", "1")["namespaces"]
    assert [p["namespace"] for p in one] == ["shop"] and one[0]["next_offset"] == 1
    table = deployment.keymem("list").stdout
    assert_fits(table)
    assert ids["postgres"] in table and "PostgreSQL 16" in table
    assert ids["redis"] not in table  # superseded: only with --all
    assert ids["redis"] in deployment.keymem("list", "--all").stdout


def test_show_finds_a_memory_in_any_namespace_with_its_keys_and_versions(
    deployed: tuple[Deployment, dict[str, str]],
) -> None:
    deployment, ids = deployed
    shown = as_json(deployment, "show", ids["valkey"])
    assert shown["memory"]["namespace"] == "shop"
    assert [v["id"] for v in shown["history"]["versions"]] == [ids["redis"], ids["valkey"]]
    table = deployment.keymem("show", ids["postgres"]).stdout
    assert_fits(table)
    assert "alembic migrations" in table and "postgres" in table
    wrong = deployment.keymem("show", ids["postgres"], "-n", "default", check=False)
    assert wrong.returncode == 1 and "namespace 'default'" in wrong.stderr


def test_search_shows_the_hybrid_ranking_with_its_evidence(
    deployed: tuple[Deployment, dict[str, str]],
) -> None:
    deployment, ids = deployed
    found = as_json(deployment, "search", "which database does the shop use?", "-n", "shop")
    (reply,) = found["results"]
    assert reply["memories"][0]["memory_id"] == ids["postgres"]
    assert "components" in reply["memories"][0]
    table = deployment.keymem("search", "strawberries", "-n", "default", "-n", "shop").stdout
    assert_fits(table)
    assert ids["strawberry"] in table and "keys strawberry" in table


def test_stats_count_each_namespace(deployed: tuple[Deployment, dict[str, str]]) -> None:
    deployment, _ = deployed
    report = as_json(deployment, "stats")
    shop = report["namespaces"]["shop"]
    assert (shop["memories"], shop["versions"]) == (2, 3)
    assert shop["keys"] >= 5 and shop["stale_share"] == 0.0
    assert 0 < shop["disk_bytes"] <= report["disk_bytes"]
    table = deployment.keymem("stats").stdout
    assert_fits(table)
    assert "shop" in table and "scratch" in table


def test_forget_of_an_unknown_id_is_an_error_and_changes_nothing(
    deployed: tuple[Deployment, dict[str, str]],
) -> None:
    deployment, ids = deployed
    before = listed_ids(deployment)
    failed = deployment.keymem("forget", ids["strawberry"], UNKNOWN_ID, check=False)
    assert failed.returncode == 1
    assert f"no memory {UNKNOWN_ID} in any namespace" in failed.stderr
    assert listed_ids(deployment) == before


def test_namespaces_show_the_mapping_in_force_and_drop_needs_yes(
    deployed: tuple[Deployment, dict[str, str]], tmp_path: Path
) -> None:
    deployment, ids = deployed
    report = as_json(deployment, "namespaces")
    assert {"default", "shop", "scratch"} <= set(report["namespaces"])
    assert report["scope"]["searched"][-1] == "default"
    assert_fits(deployment.keymem("namespaces").stdout)
    preview = deployment.keymem("namespaces", "drop", "scratch", check=False)
    assert preview.returncode == 1 and "Nothing was changed" in preview.stdout
    assert ids["scratch"] in listed_ids(deployment)
    dropped = as_json(deployment, "namespaces", "drop", "scratch", "--yes")
    assert dropped["dropped"] and dropped["memories"] == 1
    assert "scratch" not in as_json(deployment, "namespaces")["namespaces"]
    assert ids["postgres"] in listed_ids(deployment)
    missing = deployment.keymem("namespaces", "drop", "scratch", "--yes", check=False)
    assert missing.returncode == 1 and "there is no namespace 'scratch'" in missing.stderr


def test_forget_deletes_the_named_memories(deployed: tuple[Deployment, dict[str, str]]) -> None:
    deployment, ids = deployed
    done = as_json(deployment, "forget", ids["valkey"])
    assert set(done["deleted"][ids["valkey"]]) == {ids["valkey"], ids["redis"]}
    remaining = listed_ids(deployment)
    assert ids["valkey"] not in remaining and ids["redis"] not in remaining
    assert ids["postgres"] in remaining


def test_home_option_and_version(deployed: tuple[Deployment, dict[str, str]]) -> None:
    deployment, ids = deployed
    elsewhere = Deployment(deployment.home, {**deployment.env, "KEYMEM_HOME": "/nonexistent"})
    found = elsewhere.keymem("--home", str(deployment.home), "list", "-n", "shop", "--json")
    assert ids["postgres"] in found.stdout
    assert elsewhere.keymem("--version").stdout.startswith("keymem ")
    down = elsewhere.keymem("list", check=False)
    assert down.returncode == 1 and "keymem is not running" in down.stderr
