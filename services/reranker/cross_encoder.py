"""A Hugging Face cross-encoder through onnxruntime: (query, passage) in, relevance logit out.

Reads query and passage together, so it judges the passage as an answer rather than as a
neighbour in embedding space; the price is a model call over every pair. Pairs are sorted by
length and padded per group like the embedder's texts; the pair is truncated longest-first at
the token limit, so a long passage never pushes the query out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from keymem.services.embedder.models.local import ModelFiles
from keymem.services.embedder.models.registry import spec_for
from keymem.services.embedder.models.resolve import resolve_model_dir
from keymem.services.embedder.models.runtime import (
    CHARS_PER_TOKEN,
    length_groups,
    model_inputs,
    open_session,
    open_tokenizer,
)

DEFAULT_MODEL = "bge-reranker-v2-m3"


class CrossEncoderScorer:
    score_kind = "cross_encoder_logit"

    def __init__(self, files: ModelFiles, name: str, max_tokens: int, threads: int) -> None:
        fix = f"delete or replace {files.root}"
        self.model = f"{name}:{files.model.stem}-{files.digest()}"
        self.max_chars = max_tokens * CHARS_PER_TOKEN
        self._session = open_session(files, threads, fix=fix)
        self._tokenizer = open_tokenizer(files, max_tokens, fix=fix)
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._output = self._session.get_outputs()[0].name

    def score(self, query: str, passages: list[str]) -> tuple[list[float], set[int]]:
        encodings = self._tokenizer.encode_batch([(query, p) for p in passages])
        truncated = {i for i, e in enumerate(encodings) if e.overflowing}
        scores = np.empty(len(passages), dtype=np.float64)
        for group, longest in length_groups(encodings):
            scores[group] = self._run([encodings[i] for i in group], longest)
        return scores.tolist(), truncated

    def warm(self, passages: list[str]) -> int:
        return 0  # a cross-encoder reads each pair whole: nothing to compute ahead of the query

    def _run(self, encodings: list[Any], length: int) -> Any:
        feed = model_inputs(encodings, length, self._inputs)
        (logits,) = self._session.run([self._output], feed)
        logits = np.asarray(logits, dtype=np.float64)
        if logits.ndim == 2 and logits.shape[1] == 2:
            return logits[:, 1] - logits[:, 0]  # two-class head: log-odds of "relevant"
        return logits.reshape(len(encodings))


def load_cross_encoder(
    name: str | None, path: Path | None, home: Path, threads: int
) -> CrossEncoderScorer:
    if name is None:
        name = path.name if path is not None else DEFAULT_MODEL
    spec = spec_for(name, "reranker")
    files = resolve_model_dir(spec, path, home, "KEYMEM_RERANK_MODEL_PATH")
    return CrossEncoderScorer(files, spec.name, spec.max_tokens, threads)
