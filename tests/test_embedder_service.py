"""The embedder service on the offline default model (USE-m), through the router.

The model is the test process's shared one; each module gets a fresh embedder (cache and
counters) around it, and each test puts a fresh service around that into a fresh stack.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from keymem.protocol import envelope
from keymem.protocol.client import Client
from keymem.protocol.errors import BadRequest, KeymemError, TooLarge
from keymem.services.config import load
from keymem.services.embedder.backends.usem3 import MAX_CHARS as USEM3_MAX_CHARS
from keymem.services.embedder.requests import MAX_REQUEST_CHARS, MAX_TEXTS
from keymem.services.embedder.service import Embedder, make_service
from keymem.services.embedder.settings import EmbedderSettings
from keymem.services.stack import InprocStack
from tests.full_stack import fresh_embedder
from tests.wire import direct_reply


@pytest.fixture
def stack() -> Iterator[InprocStack]:
    """The default heartbeat: on a CPU shared with other work, a model call plus a scheduling
    hiccup can exceed the conftest's 300 ms liveness window and make tests flaky."""
    with InprocStack() as running:
        yield running


@pytest.fixture(scope="module")
def embedder() -> Iterator[Embedder]:
    yield fresh_embedder()


@pytest.fixture
def client(stack: InprocStack, embedder: Embedder) -> Client:
    stack.add_worker(make_service(embedder), direct=True)
    return stack.client()


def embed(client: Client, texts: Any, kind: str = "key") -> dict[str, Any]:
    result: dict[str, Any] = client.call("embedder", "embed", {"texts": texts, "kind": kind})
    return result


def test_vectors_are_normalised_float32_rows_in_order(client: Client) -> None:
    texts = ["Python", "파이썬", "딸기", "strawberry", "イチゴ"]
    result = embed(client, texts)
    vectors = result["vectors"]
    assert vectors.dtype == np.float32 and vectors.shape == (5, 512)
    assert result["dim"] == 512
    assert result["truncated"] == []
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    sims = vectors @ vectors.T
    # cross-lingual synonyms are closer than unrelated concepts
    assert sims[0, 1] > sims[0, 2] + 0.3
    assert sims[2, 3] > sims[2, 1] + 0.3
    assert sims[3, 4] > sims[3, 0] + 0.3
    # order is kept: embedding one text alone gives the same row
    alone = embed(client, ["딸기"])["vectors"][0]
    np.testing.assert_allclose(alone, vectors[2], atol=1e-5)


def test_info_describes_model_fingerprint_and_thresholds(client: Client) -> None:
    info = client.call("embedder", "info")
    assert info["backend"] == "usem3"
    assert info["model"] == "use-multilingual-v3"
    assert info["fingerprint"].startswith("usem3:use-multilingual-v3:")
    assert info["fingerprint"] == embed(client, ["x"])["fingerprint"]
    thresholds = info["thresholds"]
    assert thresholds["calibrated"] is True
    for name in ("key_merge", "key_recall", "short_key_merge", "alias_floor"):
        assert 0.0 < thresholds[name] < 1.0
    assert thresholds["key_recall"] < thresholds["key_merge"] <= thresholds["short_key_merge"]
    assert info["limits"]["max_texts"] == MAX_TEXTS


def test_long_text_is_truncated_and_reported(client: Client) -> None:
    long = "memory " * (USEM3_MAX_CHARS // 3)
    result = embed(client, ["short", long], kind="passage")
    assert result["truncated"] == [1]
    assert result["vectors"].shape == (2, 512)
    cut = embed(client, [long[:USEM3_MAX_CHARS]], kind="passage")["vectors"][0]
    np.testing.assert_allclose(result["vectors"][1], cut, atol=1e-5)


@pytest.mark.parametrize(
    ("body", "error", "fragment"),
    [
        ({"texts": ["ok", ""], "kind": "key"}, BadRequest, "texts[1] is empty"),
        ({"texts": ["   "], "kind": "key"}, BadRequest, "texts[0] is empty"),
        ({"texts": [], "kind": "key"}, BadRequest, "texts is empty"),
        ({"texts": "just a string"}, BadRequest, "must be a list"),
        ({"texts": ["ok", 3]}, BadRequest, "texts[1] must be a string, got int"),
        ({"texts": [b"\xff\xfe"]}, BadRequest, "texts[0] must be a string, got bytes"),
        ({"texts": ["ok"], "kind": "document"}, BadRequest, "kind must be one of"),
        ({"texts": ["ok"], "extra": 1}, BadRequest, "unknown field"),
        (["not", "a", "map"], BadRequest, "body must be a map"),
        (None, BadRequest, "body must be a map"),
        ({"texts": ["k"] * (MAX_TEXTS + 1)}, TooLarge, "at most"),
        ({"texts": ["x" * 4000] * 9}, TooLarge, str(MAX_REQUEST_CHARS)),
    ],
)
def test_bad_input_is_a_typed_error_and_service_stays_up(
    client: Client, body: Any, error: type[KeymemError], fragment: str
) -> None:
    with pytest.raises(error) as raised:
        client.call("embedder", "embed", body)
    assert fragment in raised.value.message
    assert embed(client, ["still up"])["vectors"].shape == (1, 512)


def test_invalid_utf8_on_the_wire_is_a_bad_request(stack: InprocStack, client: Client) -> None:
    # msgpack str (0xa2) holding two bytes that are not UTF-8, inside {"texts": [<str>]}
    body = b"\x81\xa5texts\x91\xa2\xff\xfe"
    request = envelope.Request(b"bad-utf8", "embedder", "embed", envelope.now_ms() + 3000, body)
    direct = stack.workers[0].worker.direct_endpoint
    assert direct is not None
    reply = direct_reply(stack.context, direct, request, 3000)
    assert reply.status == b"bad_request"
    assert embed(client, ["still up"])["vectors"].shape == (1, 512)


def test_cache_answers_repeated_texts_without_the_model(client: Client, embedder: Embedder) -> None:
    first = embed(client, ["cache me once", "cache me twice"])["vectors"]
    calls = embedder.model_calls
    again = embed(client, ["cache me twice", "cache me once"])["vectors"]
    assert embedder.model_calls == calls
    np.testing.assert_array_equal(again, first[::-1])


def test_concurrent_requests_are_coalesced_and_answered_separately(
    stack: InprocStack, client: Client, embedder: Embedder
) -> None:
    texts = [f"concurrent key {i}" for i in range(24)]
    expected = {t: embedder.backend.encode([t], "key").vectors[0] for t in texts}
    clients = [stack.client() for _ in texts]
    results: dict[str, Any] = {}
    barrier = threading.Barrier(len(texts))

    def call(i: int) -> None:
        barrier.wait()
        results[texts[i]] = embed(clients[i], [texts[i]])

    calls_before = embedder.model_calls
    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for text in texts:
        np.testing.assert_allclose(results[text]["vectors"][0], expected[text], atol=1e-5)
    assert embedder.model_calls - calls_before < len(texts)


def test_one_bad_body_in_a_batch_does_not_fail_its_neighbours(embedder: Embedder) -> None:
    results = embedder.embed_many(
        [{"texts": ["fine one"]}, {"texts": [""]}, {"texts": ["fine two"], "kind": "query"}]
    )
    assert isinstance(results[1], BadRequest)
    assert results[0]["vectors"].shape == (1, 512)
    assert results[2]["vectors"].shape == (1, 512)


def test_service_without_batching_registers_capacity_one(embedder: Embedder) -> None:
    service = make_service(embedder, batching=False)
    assert service.capacity == 1
    assert service.methods["embed"].max_batch == 1


def test_settings_read_from_env(tmp_path: Path) -> None:
    def settings(env: dict[str, str]) -> EmbedderSettings:
        return EmbedderSettings.from_config(load(env, home=tmp_path))

    config = settings(
        {
            "EMBEDDING_BACKEND": "ONNX",
            "LOCAL_EMBEDDING_MODEL": "multilingual-e5-small",
            "LOCAL_EMBEDDING_MODEL_PATH": "/models/e5",
            "KEYMEM_EMBED_THREADS": "3",
            "KEYMEM_EMBED_BATCHING": "false",
            "OPENAI_BASE_URL": "http://127.0.0.1:9/v1/",
        }
    )
    assert config.backend == "onnx"
    assert config.local_model == "multilingual-e5-small"
    assert config.local_model_path == Path("/models/e5")
    assert config.threads == 3 and config.batching is False
    assert config.openai.base_url == "http://127.0.0.1:9/v1"
    with pytest.raises(ValueError, match="EMBEDDING_BACKEND"):
        settings({"EMBEDDING_BACKEND": "word2vec"})
    with pytest.raises(ValueError, match="KEYMEM_EMBED_THREADS"):
        settings({"KEYMEM_EMBED_THREADS": "0"})
    assert settings({}).backend == "usem3"
