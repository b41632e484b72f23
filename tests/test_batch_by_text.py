"""A remember_batch through the real services sends the graph no vector of a key it holds: each
is filed by its text, only the texts the graph names are embedded and sent again, and the batch
is written, linked and found as one sent with every key's vector (services/memory/service.py
``MemoryAPI.filed``, services/graph/service.py ``_filed_by_text``)."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from keymem.protocol.errors import BadRequest
from keymem.services.memory.horizon import WriteHorizon
from keymem.services.memory.service import MemoryAPI
from keymem.services.memory.warmup import Warmer
from tests.full_stack import FullStack, full_stack

SETTLE_S = 15.0
# Three keys or more each, so no item takes auto-keys and both paths file exactly these.
SEED = [
    ("Newton watched an apple fall in his garden", ["Newton", "apple", "garden"]),
    ("The user likes strawberries with cream", ["strawberry", "cream", "dessert"]),
    ("The harbour lighthouse sounds its fog horn", ["harbour", "lighthouse", "fog horn"]),
]
HELD = [
    ("Apples from the garden go into the pie", ["apple", "garden", "dessert"]),
    ("Newton kept a strawberry patch", ["Newton", "strawberry", "garden"]),
    ("Fog horn practice at the harbour", ["fog horn", "harbour", "lighthouse"]),
]
MIXED = [
    ("The keeper rows across the harbour", ["harbour", "keeper", "rowing boat"]),
    ("Cream goes on the scones", ["cream", "scone", "dessert"]),
    ("The lighthouse keeper plants apples", ["lighthouse", "keeper", "apple"]),
]


@pytest.fixture(scope="module")
def deployed() -> Iterator[FullStack]:
    with tempfile.TemporaryDirectory(prefix="km-") as home, full_stack(Path(home)) as running:
        yield running


def items(memories: list[tuple[str, list[str]]], namespace: str) -> list[dict[str, Any]]:
    return [{"content": c, "keys": k, "namespace": namespace} for c, k in memories]


def embedded(running: FullStack) -> int:
    """Texts the embedder has been asked for so far."""
    cache = running.client.call("embedder", "info", {})["cache"]
    return int(cache["hits"] + cache["misses"])


def graph_calls(running: FullStack) -> tuple[int, int]:
    """The requests the router has passed to the graph, and the writes it answered with the
    keys it lacks (``keys_asked``); those are steps of a write, so ``keymem status`` must not
    show them as the graph's errors."""
    graph = running.client.call("router", "stats")["services"]["graph"]
    assert graph["errors"] == 0, graph["errors_by_code"]
    return int(graph["requests"]), int(graph["keys_asked"])


def with_vectors(running: FullStack, batch: list[dict[str, Any]]) -> dict[str, Any]:
    """``batch`` as a write carrying every key's vector: the graph's stored one of a key it
    holds, the embedder's of the others (the memory service's body before keys went by text)."""
    namespace = batch[0]["namespace"]
    texts = list(dict.fromkeys(k for item in batch for k in item["keys"]))
    held = running.client.call("graph", "held_vectors", {"keys": texts, "namespace": namespace})
    found = [t for t, h in zip(texts, held["held"], strict=True) if h]
    vectors = dict(zip(found, held["vectors"], strict=True))
    new = [t for t in texts if t not in vectors]
    if new:
        embedding = running.client.call("embedder", "embed", {"texts": new, "kind": "key"})
        vectors.update(zip(new, embedding["vectors"], strict=True))
        assert embedding["fingerprint"] == held["fingerprint"]
    return {
        "items": [{**i, "key_vectors": np.stack([vectors[k] for k in i["keys"]])} for i in batch],
        "fingerprint": held["fingerprint"],
    }


def filed(running: FullStack, saved: str, namespace: str) -> list[tuple[str, float, bool]]:
    """(concept, link weight, auto) of each key a memory is filed under."""
    view = running.memory("get_memories", {"ids": [saved], "namespace": namespace})
    return sorted((k["concept"], k["link_weight"], k["auto"]) for k in view["memories"][0]["keys"])


def settle(running: FullStack) -> None:
    """Until every memory has its passage vector (the warm-up pass makes them in idle time), so
    both namespaces' searches see the same legs."""
    deadline = time.monotonic() + SETTLE_S
    while running.client.call("graph", "vector_backlog", {"limit": 0})["missing"]:
        assert time.monotonic() < deadline, "the passage vectors were not made in time"
        time.sleep(0.1)


def found(running: FullStack, query: str, namespace: str, seq: int) -> list[str]:
    body = {"query": query, "namespace": namespace, "top_k": 10, "min_seq": seq}
    return sorted(m["content"] for m in running.memory("search", body)["memories"])


def test_a_batch_files_held_keys_by_text_and_matches_one_sent_with_vectors(
    deployed: FullStack,
) -> None:
    for namespace in ("text", "vectors"):
        deployed.memory("remember_batch", {"items": items(SEED, namespace)})
    before_texts, (before_requests, before_refusals) = embedded(deployed), graph_calls(deployed)
    by_text = deployed.memory("remember_batch", {"items": items(HELD, "text")})
    # held keys only: one graph request, no lookup, no refusal, no model call
    assert graph_calls(deployed) == (before_requests + 1, before_refusals)
    assert embedded(deployed) == before_texts

    before_texts, (_, before_refusals) = embedded(deployed), graph_calls(deployed)
    mixed = deployed.memory("remember_batch", {"items": items(MIXED, "text")})
    # one refusal names the new keys; only they are embedded, once each
    assert graph_calls(deployed)[1] == before_refusals + 1
    assert embedded(deployed) - before_texts == 3  # keeper, rowing boat, scone

    seq = 0
    for batch, reply in ((HELD, by_text), (MIXED, mixed)):
        vectors = deployed.client.call(
            "graph", "remember_batch", with_vectors(deployed, items(batch, "vectors"))
        )
        seq = vectors["seq"]
        for ours, theirs in zip(reply["results"], vectors["results"], strict=True):
            assert filed(deployed, ours["saved"], "text") == filed(
                deployed, theirs["saved"], "vectors"
            )
    counts = {
        ns: deployed.memory("counts", {"namespace": ns})["namespaces"][ns]
        for ns in ("text", "vectors")
    }
    assert counts["text"] == counts["vectors"]
    settle(deployed)
    for query in ("keeper", "apple pie", "scones with cream", "harbour fog horn"):
        assert found(deployed, query, "text", seq) == found(deployed, query, "vectors", seq)
    assert "The keeper rows across the harbour" in found(deployed, "keeper", "text", seq)


def test_a_batch_resent_under_its_idempotency_key_is_written_once(deployed: FullStack) -> None:
    body = {"items": items(MIXED, "once"), "idempotency_key": "batch-once-1"}
    first = deployed.memory("remember_batch", body)
    again = deployed.memory("remember_batch", body)
    assert again["batch_id"] == first["batch_id"]
    assert [r["saved"] for r in again["results"]] == [r["saved"] for r in first["results"]]
    assert deployed.memory("counts", {"namespace": "once"})["memories"] == len(MIXED)


def test_a_bad_item_is_refused_before_any_key_is_embedded(deployed: FullStack) -> None:
    """Every other check runs before the graph names keys it lacks: a bad batch costs no model
    call and writes nothing."""
    bad = [*items(MIXED, "bad"), {"content": "", "keys": ["unheard of key"], "namespace": "bad"}]
    texts = embedded(deployed)
    with pytest.raises(BadRequest, match="item 3: content must be a non-empty string"):
        deployed.memory("remember_batch", {"items": bad})
    assert embedded(deployed) == texts
    assert deployed.memory("counts", {"namespace": "bad"})["memories"] == 0


def test_a_key_dropped_between_two_tries_is_named_again_and_each_item_written_once(
    deployed: FullStack,
) -> None:
    """The graph refuses the batch for its new keys; before it goes again with their vectors,
    the one memory under a key it held is forgotten, and the key with it: the second try is
    refused for that key, the third carries its vector too and writes every item once."""
    namespace = "race"
    doomed = deployed.memory(
        "remember",
        {
            "content": "A lantern by the door",
            "keys": ["lantern", "door", "hook"],
            "namespace": namespace,
        },
    )["saved"]
    batch = items(
        [
            ("A candle beside the lantern", ["candle", "lantern", "wick"]),
            ("The lantern's glass is cracked", ["lantern", "glass", "crack"]),
        ],
        namespace,
    )
    frontend = deployed.stack.endpoints.frontend
    warmer = Warmer(frontend)
    api = MemoryAPI(frontend, WriteHorizon(), warmer)
    sent: list[list[Any]] = []

    def send(bodies: list[Any]) -> list[Any]:
        sent.append(bodies)
        outcomes = api.alone("remember_batch")(bodies)
        if len(sent) == 1:
            deployed.memory("forget", {"memory_id": doomed, "namespace": namespace})
        return outcomes

    try:
        (reply,) = api.filed([{"items": batch}], send)
    finally:
        warmer.close()
        api.client.close()
    assert [b[0].get("embedded_keys") for b in sent] == [
        None,
        ["candle", "wick", "glass", "crack"],
        ["candle", "wick", "glass", "crack", "lantern"],
    ]
    assert isinstance(reply, dict), reply
    assert deployed.memory("counts", {"namespace": namespace})["memories"] == 2
    for saved in reply["results"]:
        assert "lantern" in [c for c, _, _ in filed(deployed, saved["saved"], namespace)]
