"""The search's analysis stage on the real services: what it asks the lexicon, in which order.

The lexicon serves one request at a time, so BM25 and the query's phrases follow each other
on it. The phrases come first: their embedding then runs while BM25 does, and BM25, the long
leg in a large store, ends the stage alone (``Search._analyse``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keymem.protocol.worker import Handler
from keymem.services.stack import InprocStack
from tests.full_stack import FullStack, start_services


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[FullStack, list[str]]]:
    """A full stack whose lexicon records the methods it serves, in order."""
    with InprocStack() as inproc:
        running = start_services(inproc, inproc.settings(tmp_path))
        served: list[str] = []
        methods = running.workers["lexicon"].worker.service.methods
        for name in ("search", "extract_keys"):

            def recorded(
                body: Any, name: str = name, handler: Handler = methods[name].handler
            ) -> Any:
                served.append(name)
                return handler(body)

            methods[name] = dataclasses.replace(methods[name], handler=recorded)
        yield running, served


def test_the_phrases_are_read_before_bm25_and_the_answer_is_whole(
    stack: tuple[FullStack, list[str]],
) -> None:
    running, served = stack
    wanted = running.remember("Miso the cat sleeps on the green sofa", ["Miso", "cat"])
    for content, key in [
        ("The tomato seedlings need watering twice a day", "garden"),
        ("The quarterly report shows revenue grew four percent", "report"),
        ("Python 3.13 removed the GIL in an experimental build", "python"),
    ]:
        running.remember(content, [key])
    served.clear()
    reply = running.search("where does the cat Miso sleep?")
    assert served == ["extract_keys", "search"]
    assert reply["memories"][0]["memory_id"] == wanted
    assert reply["degraded"] == {}
    assert reply["memories"][0]["components"]["bm25_rank"] == 1
