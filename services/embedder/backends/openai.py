"""Any OpenAI-compatible ``/embeddings`` HTTP API (OpenAI itself, or a local server).

Plain ``urllib``: one POST per model call, no SDK dependency. The request must finish well
inside the worker's heartbeat window, so the timeout is short; a slow or failing upstream is a
typed ``unavailable`` for the caller, and a 4xx about our input a ``bad_request``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import numpy as np

from keymem.protocol.errors import BadRequest, Unavailable
from keymem.services.embedder.backends.base import Encoded, Kind, l2_normalise
from keymem.services.embedder.settings import DEFAULT_OPENAI_BASE_URL, OpenAISettings

REQUEST_TIMEOUT_S = 1.5
# text-embedding-3 models accept 8,191 tokens; ~4 characters per token for English.
MAX_CHARS = 16_000
# Inputs per HTTP call (OpenAI accepts 2,048; smaller calls keep each well inside the timeout).
MAX_INPUTS_PER_CALL = 256


class OpenAIBackend:
    name = "openai"
    max_chars = MAX_CHARS

    def __init__(self, settings: OpenAISettings) -> None:
        if settings.api_key is None and settings.base_url == DEFAULT_OPENAI_BASE_URL:
            raise ValueError(
                "EMBEDDING_BACKEND=openai needs OPENAI_API_KEY (or OPENAI_BASE_URL pointing at a "
                "compatible server that needs no key)"
            )
        self.model = settings.model
        self._settings = settings
        self._url = f"{settings.base_url}/embeddings"
        # One call at start: proves the endpoint and key work and tells us the dimension.
        self.dim = int(self.encode(["keymem"], "query").vectors.shape[1])
        self.variant = f"d{self.dim}"

    def encode(self, texts: list[str], kind: Kind) -> Encoded:
        chunks = [
            self._post(texts[i : i + MAX_INPUTS_PER_CALL])
            for i in range(0, len(texts), MAX_INPUTS_PER_CALL)
        ]
        return Encoded(l2_normalise(np.concatenate(chunks)))

    def _post(self, texts: list[str]) -> np.ndarray:
        payload = json.dumps({"model": self.model, "input": texts, "encoding_format": "float"})
        headers = {"Content-Type": "application/json"}
        if self._settings.api_key:
            headers["Authorization"] = f"Bearer {self._settings.api_key}"
        request = urllib.request.Request(self._url, payload.encode(), headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                body: Any = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode("utf-8", "replace")
            if 400 <= exc.code < 500 and exc.code not in (401, 403, 408, 429):
                raise BadRequest(f"embedding API refused the input ({exc.code}): {detail}") from exc
            raise Unavailable(
                f"embedding API at {self._url} answered {exc.code}: {detail}"
            ) from exc
        except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
            raise Unavailable(f"embedding API at {self._url} failed: {exc}") from exc
        try:
            rows = sorted(body["data"], key=lambda item: item["index"])
            vectors = np.array([row["embedding"] for row in rows], dtype=np.float32)
        except (KeyError, TypeError, ValueError) as exc:
            raise Unavailable(f"embedding API at {self._url} sent an unexpected body") from exc
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise Unavailable(
                f"embedding API at {self._url} returned {vectors.shape[0]} vectors for "
                f"{len(texts)} texts"
            )
        return vectors
