"""The OpenAI-compatible backend against a real HTTP server on loopback, started here.

The server speaks the ``/v1/embeddings`` shape: it checks the bearer key, answers rows out of
order (clients must sort by ``index``) and unnormalised (we normalise), and can be told to fail.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from keymem.protocol.errors import BadRequest, Unavailable
from keymem.services.embedder.backends.openai import OpenAIBackend
from keymem.services.embedder.service import Embedder, make_service
from keymem.services.embedder.settings import OpenAISettings
from keymem.services.stack import InprocStack

KEY = "sk-test-key"
DIM = 8


def fake_vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [float(b) + 1.0 for b in digest[:DIM]]


class EmbeddingsServer(ThreadingHTTPServer):
    fail_with: int | None = None
    requests: list[dict[str, Any]]


class Handler(BaseHTTPRequestHandler):
    server: EmbeddingsServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(
            {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
        )
        if self.path != "/v1/embeddings":
            self._send(404, {"error": {"message": "no such route"}})
        elif self.headers.get("Authorization") != f"Bearer {KEY}":
            self._send(401, {"error": {"message": "bad key"}})
        elif self.server.fail_with is not None:
            self._send(self.server.fail_with, {"error": {"message": "told to fail"}})
        else:
            rows = [
                {"object": "embedding", "index": i, "embedding": fake_vector(t)}
                for i, t in enumerate(body["input"])
            ]
            self._send(200, {"object": "list", "data": rows[::-1], "model": body["model"]})


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddingsServer]:
    httpd = EmbeddingsServer(("127.0.0.1", 0), Handler)
    httpd.requests = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def settings_for(server: EmbeddingsServer, key: str | None = KEY) -> OpenAISettings:
    host, port = server.server_address[:2]
    return OpenAISettings(key, f"http://{host!s}:{port}/v1", "test-embed-small")


@pytest.fixture
def backend(server: EmbeddingsServer) -> OpenAIBackend:
    server.fail_with = None
    return OpenAIBackend(settings_for(server))


def test_vectors_come_back_normalised_in_input_order(
    backend: OpenAIBackend, server: EmbeddingsServer
) -> None:
    encoded = backend.encode(["first", "second", "third"], "key")
    expected = np.array([fake_vector(t) for t in ["first", "second", "third"]], dtype=np.float32)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(encoded.vectors, expected, atol=1e-6)
    last = server.requests[-1]
    assert last["auth"] == f"Bearer {KEY}"
    assert last["body"]["model"] == "test-embed-small"
    assert backend.dim == DIM and backend.variant == f"d{DIM}"


def test_service_on_openai_backend(backend: OpenAIBackend, server: EmbeddingsServer) -> None:
    with InprocStack() as stack:
        stack.add_worker(make_service(Embedder(backend, 100, 0.0)))
        client = stack.client()
        result = client.call("embedder", "embed", {"texts": ["a", "b"], "kind": "query"})
        assert result["vectors"].shape == (2, DIM)
        assert result["fingerprint"] == "openai:test-embed-small:d8"
        # an upstream outage is a typed error for the caller, and the service stays up
        server.fail_with = 503
        try:
            with pytest.raises(Unavailable, match="503"):
                client.call("embedder", "embed", {"texts": ["never seen"], "kind": "query"})
        finally:
            server.fail_with = None
        assert client.call("embedder", "embed", {"texts": ["c"]})["vectors"].shape == (1, DIM)


def test_upstream_refusing_the_input_is_a_bad_request(
    backend: OpenAIBackend, server: EmbeddingsServer
) -> None:
    server.fail_with = 400
    try:
        with pytest.raises(BadRequest, match="400"):
            backend.encode(["x"], "key")
    finally:
        server.fail_with = None


def test_wrong_key_fails_at_start(server: EmbeddingsServer) -> None:
    with pytest.raises(Unavailable, match="401"):
        OpenAIBackend(settings_for(server, key="sk-wrong"))


def test_unreachable_server_is_unavailable() -> None:
    with pytest.raises(Unavailable, match="failed"):
        OpenAIBackend(OpenAISettings(KEY, "http://127.0.0.1:9/v1", "m"))


def test_default_url_without_key_is_refused() -> None:
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        OpenAIBackend(OpenAISettings(None, "https://api.openai.com/v1", "m"))


def test_upstream_outage_fails_a_batch_once_and_spares_cached_texts(
    backend: OpenAIBackend, server: EmbeddingsServer
) -> None:
    embedder = Embedder(backend, 100, 0.0)
    embedder.embed_many([{"texts": ["cached already"]}])
    server.fail_with = 503
    before = len(server.requests)
    try:
        results = embedder.embed_many(
            [{"texts": ["new one"]}, {"texts": ["cached already"]}, {"texts": ["new two"]}]
        )
    finally:
        server.fail_with = None
    assert isinstance(results[0], Unavailable) and isinstance(results[2], Unavailable)
    assert results[1]["vectors"].shape == (1, DIM)
    assert len(server.requests) - before == 1  # one upstream call for the whole batch


def test_services_build_from_the_environment(
    server: EmbeddingsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What supervisord runs: ``build(Settings.from_env())`` with only variables set."""
    from keymem.services import embedder, reranker
    from keymem.services.config import Settings

    host, port = server.server_address[:2]
    monkeypatch.setenv("EMBEDDING_BACKEND", "openai")
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://{host!s}:{port}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_EMBEDDING_MODEL", "env-model")
    monkeypatch.setenv("KEYMEM_RERANK_MIN_SCORE", "0.25")
    embedder_service = embedder.build(Settings.from_env())
    assert embedder_service.capacity > 1 and embedder_service.methods["embed"].batch
    reranker_service = reranker.build(Settings.from_env())
    with InprocStack() as stack:
        stack.add_worker(embedder_service)
        stack.add_worker(reranker_service)
        client = stack.client()
        assert client.call("embedder", "info")["fingerprint"] == "openai:env-model:d8"
        # the reranker's offline-style default follows the configured embedding backend
        result = client.call("reranker", "score", {"query": "q", "passages": ["a", "b"]})
        assert result["score_kind"] == "embedding_cosine"
        assert result["model"] == "openai:env-model:d8"
        assert result["gate"]["min_score"] == 0.25
    monkeypatch.setenv("KEYMEM_RERANK", "false")
    assert reranker.build(Settings.from_env()).name == "reranker"
