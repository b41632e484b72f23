"""Project scope without a config file: a working directory inside a git repository reads its
project's namespace and `default`, never another project's; namespaces.json still wins."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters, stdio_client

from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.protocol.limits import NAMESPACE_MAX_CHARS
from keymem.services.scope import DEFAULT_NAMESPACE, project_namespace, scope_of
from tests.supervised import deployment_env, running_deployment
from tests.test_hook import context_of, host_payload, run_hook

SHOP_FACT = "The checkout service retries card payments three times before failing"
USER_FACT = "The user prefers short answers with code examples"
OTHER_FACT = "The payments team retries card payments five times in the billing project"


def git_repo(parent: Path, name: str) -> Path:
    """A real repository (git init), with a subfolder to stand in."""
    root = parent / name
    (root / "src" / "deep").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def test_a_git_root_names_a_stable_normalised_project(tmp_path: Path) -> None:
    root = git_repo(tmp_path, "My Shop (v2)!")
    inside = scope_of(str(root / "src" / "deep"), tmp_path / "home")
    assert inside.project == project_namespace(root) and inside.source == "git root"
    assert inside.project.startswith("my-shop-v2-")
    assert inside.namespaces == [inside.project, DEFAULT_NAMESPACE]
    assert scope_of(str(root), tmp_path / "home").project == inside.project  # stable
    twin = git_repo(tmp_path / "elsewhere", "My Shop (v2)!")
    assert project_namespace(twin) != inside.project  # same folder name, other checkout
    assert len(project_namespace(tmp_path / ("x" * 250))) <= NAMESPACE_MAX_CHARS


def test_a_mapping_wins_and_no_repository_means_no_project(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    root = git_repo(tmp_path, "shop")
    (home / "namespaces.json").write_text(json.dumps({str(root / "src"): "Shop-Core"}))
    mapped = scope_of(str(root / "src" / "deep"), home)
    assert (mapped.project, mapped.source) == ("shop-core", "namespaces.json")
    assert scope_of(str(root), home).source == "git root"
    plain = tmp_path / "plain"
    plain.mkdir()
    assert scope_of(str(plain), home).namespaces == [DEFAULT_NAMESPACE]
    assert scope_of(None, home).namespaces == [DEFAULT_NAMESPACE]


@pytest.fixture(scope="module")
def projects() -> Iterator[tuple[Path, dict[str, Path], dict[str, str]]]:
    parent = Path(tempfile.mkdtemp(prefix="km-scope-"))
    shop, billing = git_repo(parent, "shop"), git_repo(parent, "billing")
    with running_deployment() as deployment:
        with Client(ipc_endpoints(deployment.home).frontend, timeout_ms=30_000) as client:

            def remember(content: str, keys: list[str], namespace: str) -> str:
                body = {"content": content, "keys": keys, "namespace": namespace}
                saved: str = client.call("memory", "remember", body)["saved"]
                return saved

            ids = {
                "shop": remember(
                    SHOP_FACT, ["card payments", "retries", "checkout"], project_namespace(shop)
                ),
                "user": remember(USER_FACT, ["answer style", "code examples"], DEFAULT_NAMESPACE),
                "billing": remember(
                    OTHER_FACT, ["card payments", "retries", "billing"], project_namespace(billing)
                ),
            }
        yield deployment.home, {"shop": shop, "billing": billing}, ids
    shutil.rmtree(parent, ignore_errors=True)


@pytest.mark.supervised
def test_the_hook_in_a_repository_surfaces_its_project_and_default_not_another_project(
    projects: tuple[Path, dict[str, Path], dict[str, str]],
) -> None:
    home, roots, ids = projects
    prompt = "how many times do we retry card payments? keep the answer short with code examples"
    completed, _ = run_hook(home, host_payload(prompt, cwd=str(roots["shop"] / "src" / "deep")))
    context = context_of(completed)
    assert ids["shop"] in context and ids["user"] in context
    assert ids["billing"] not in context
    # The other project's fact answers the same prompt from its own repository.
    completed, _ = run_hook(home, host_payload(prompt, cwd=str(roots["billing"])))
    context = context_of(completed)
    assert ids["billing"] in context and ids["shop"] not in context


@pytest.mark.supervised
def test_the_mcp_server_in_a_repository_names_its_project_and_recalls_it_with_default(
    projects: tuple[Path, dict[str, Path], dict[str, str]],
) -> None:
    home, roots, ids = projects
    project = project_namespace(roots["shop"])
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "keymem.services.cli", "mcp"],
        env=deployment_env(home),
        cwd=str(roots["shop"] / "src"),
    )

    async def session() -> tuple[str | None, dict[str, Any]]:
        with tempfile.TemporaryFile("w+") as errlog:
            async with McpClient(stdio_client(params, errlog=errlog)) as client:
                recalled = await client.call_tool("recall", {"query": "card payments retries"})
                assert not recalled.is_error, recalled.content
                assert recalled.structured_content is not None
                return client.instructions, recalled.structured_content

    instructions, recalled = asyncio.run(session())
    assert instructions is not None and f"namespace={project!r}" in instructions
    assert recalled["namespaces"] == [project, DEFAULT_NAMESPACE]
    spaces = {key["namespace"] for key in recalled["keys"]}
    assert project in spaces and spaces <= {project, DEFAULT_NAMESPACE}
    assert [m["id"] for m in recalled["memories"]] == [ids["shop"]]
