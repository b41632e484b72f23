"""Hugging Face embedding models through onnxruntime + tokenizers (bge-m3, e5, MiniLM, ...).

Texts are sorted by token length and run in groups, each padded only to its own longest text,
so a batch of short keys never pays for one long passage. Pooling (CLS or mean over real
tokens), query/passage prefixes and the token limit come from the model's spec; vectors are
L2-normalised so cosine is a dot product everywhere downstream.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from keymem.services.embedder.backends.base import Encoded, Kind, Vectors, l2_normalise
from keymem.services.embedder.models.local import ModelFiles
from keymem.services.embedder.models.registry import ModelSpec, spec_for
from keymem.services.embedder.models.resolve import resolve_model_dir
from keymem.services.embedder.models.runtime import (
    CHARS_PER_TOKEN,
    length_groups,
    model_inputs,
    open_session,
    open_tokenizer,
)

# The original keymem's recommended model: multilingual, 1024-d, calibrated thresholds known.
DEFAULT_MODEL = "bge-m3"


def pool(hidden: npt.NDArray[np.float32], mask: npt.NDArray[np.int64], how: str) -> Vectors:
    if how == "cls":
        return np.ascontiguousarray(hidden[:, 0, :], dtype=np.float32)
    weights = mask[:, :, None].astype(np.float32)
    summed = (hidden * weights).sum(axis=1)
    mean: Vectors = (summed / np.maximum(weights.sum(axis=1), 1.0)).astype(np.float32)
    return mean


class OnnxBackend:
    name = "onnx"

    def __init__(self, files: ModelFiles, spec: ModelSpec, threads: int, fix: str = "") -> None:
        fix = fix or f"delete or replace {files.root}"
        self.model = spec.name
        self.spec = spec
        self.pooling = files.pooling
        self.max_chars = spec.max_tokens * CHARS_PER_TOKEN
        self._session = open_session(files, threads, fix=fix)
        self._tokenizer = open_tokenizer(files, spec.max_tokens, fix=fix)
        self._inputs = {i.name for i in self._session.get_inputs()}
        outputs = [o.name for o in self._session.get_outputs()]
        # Some exports pool inside the graph; prefer their sentence embedding when present.
        self._output = "sentence_embedding" if "sentence_embedding" in outputs else outputs[0]
        self.variant = f"{files.model.stem}-{self.pooling}-{files.digest()}"
        self.dim = int(self.encode(["warm up"], "query").vectors.shape[1])

    def _prefix(self, kind: Kind) -> str:
        return self.spec.passage_prefix if kind == "passage" else self.spec.query_prefix

    def encode(self, texts: list[str], kind: Kind) -> Encoded:
        prefix = self._prefix(kind)
        encodings = self._tokenizer.encode_batch([prefix + t for t in texts])
        truncated = frozenset(i for i, e in enumerate(encodings) if e.overflowing)
        out: Vectors | None = None
        for group, longest in length_groups(encodings):
            vectors = self._run([encodings[i] for i in group], longest)
            if out is None:
                out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
            out[group] = vectors
        assert out is not None
        return Encoded(l2_normalise(out), truncated)

    def _run(self, encodings: list[Any], length: int) -> Vectors:
        feed = model_inputs(encodings, length, self._inputs)
        (result,) = self._session.run([self._output], feed)
        hidden = np.asarray(result, dtype=np.float32)
        return hidden if hidden.ndim == 2 else pool(hidden, feed["attention_mask"], self.pooling)


def load_onnx_backend(
    name: str | None, path: Path | None, home: Path, threads: int, path_variable: str
) -> OnnxBackend:
    """``name`` picks the spec (pooling, prefixes); a path without a name runs with defaults."""
    if name is None:
        name = path.name if path is not None else DEFAULT_MODEL
    spec = spec_for(name, "embedder")
    files = resolve_model_dir(spec, path, home, path_variable)
    return OnnxBackend(files, spec, threads)
