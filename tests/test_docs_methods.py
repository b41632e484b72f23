"""Each service's documented method table lists exactly the methods it serves.

The served side is what the router learned from each worker's registration (``router.stats``)
in a whole in-process keymem, and the router's own methods (listed there too); the documented
side is the first column of the ``| method |`` tables in the service's section of docs/.
``ping`` and ``stats`` are every worker's built-ins, documented once in docs/PROTOCOL.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from keymem.protocol.worker import BUILTIN_METHODS
from keymem.store.schema import SCHEMA_VERSION
from tests.full_stack import FullStack, full_stack

DOCS = Path(__file__).resolve().parent.parent / "docs"

# service -> (doc, the heading its section starts at, the heading level that ends it)
SECTIONS = {
    "graph": ("GRAPH.md", "## Methods", 2),
    "lexicon": ("LEXICON.md", "## Methods", 2),
    "embedder": ("MODELS.md", "## Embedder contract", 2),
    "reranker": ("MODELS.md", "## Reranker contract", 2),
    "memory": ("RECALL.md", "# Recall", 2),
    "router": ("PROTOCOL.md", "## The router's own methods", 2),
}
HEADING = re.compile(r"^(#+) ")
METHOD_NAME = re.compile(r"`([a-z_]+)`")


def section(doc: str, start: str, end_level: int) -> list[str]:
    lines = (DOCS / doc).read_text(encoding="utf-8").splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    body = []
    for line in lines[first + 1 :]:
        heading = HEADING.match(line)
        if heading and len(heading.group(1)) <= end_level:
            break
        body.append(line)
    return body


def documented_methods(doc: str, start: str, end_level: int) -> set[str]:
    """Names in the first column of every table whose header's first column is ``method``."""
    names: set[str] = set()
    in_table = False
    for line in section(doc, start, end_level):
        if not line.startswith("|"):
            in_table = False
            continue
        first_cell = line.split("|")[1].strip()
        if first_cell == "method":
            in_table = True
        elif in_table and not first_cell.startswith("---"):
            names.update(METHOD_NAME.findall(first_cell))
    return names


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, set[str]]]:
    running: FullStack
    with full_stack(tmp_path_factory.mktemp("methods")) as running:
        stats = running.client.call("router", "stats")
        served = {"router": stats["router"], **stats["services"]}
        yield {name: set(info["methods"]) - set(BUILTIN_METHODS) for name, info in served.items()}


@pytest.mark.parametrize("service", sorted(SECTIONS))
def test_documented_methods_are_the_served_methods(
    service: str, served: dict[str, set[str]]
) -> None:
    documented = documented_methods(*SECTIONS[service]) - set(BUILTIN_METHODS)
    assert documented, f"no method table found for {service}"
    missing = served[service] - documented
    stale = documented - served[service]
    assert not missing, (
        f"{service} serves {sorted(missing)}: document them in {SECTIONS[service][0]}"
    )
    assert not stale, (
        f"{SECTIONS[service][0]} documents {sorted(stale)}, which {service} does not serve"
    )


def test_every_served_service_has_a_documented_table(served: dict[str, set[str]]) -> None:
    assert set(served) == set(SECTIONS)


def test_graph_doc_names_the_current_schema_version() -> None:
    text = (DOCS / "GRAPH.md").read_text(encoding="utf-8")
    assert f"## Tables (schema version {SCHEMA_VERSION})" in text
    assert f"v{SCHEMA_VERSION}:" in text, "GRAPH.md's migrations must list the newest one"
