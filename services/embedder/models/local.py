"""Find and check the files of an ONNX model directory, with errors that say how to fix it.

Accepts the layouts exports come in: ``model.onnx`` at the top or under ``onnx/``, and
``tokenizer.json`` beside it or at the top. A sentence-transformers ``1_Pooling/config.json``
overrides the pooling the registry assumed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from keymem.services.embedder.models.registry import ModelSpec, Pooling

MODEL_CANDIDATES = (
    "model.onnx",
    "onnx/model.onnx",
    "model_quantized.onnx",
    "onnx/model_quantized.onnx",
)
TOKENIZER_CANDIDATES = ("tokenizer.json", "onnx/tokenizer.json")
# Bytes read from each end of the model file for its digest: cheap even for 2 GB models,
# and any re-export or re-quantisation changes them.
DIGEST_EDGE_BYTES = 1 << 20


class ModelDirError(RuntimeError):
    """A model directory that is missing, incomplete or unreadable; the message says the fix."""


@dataclass(frozen=True)
class ModelFiles:
    root: Path
    model: Path
    tokenizer: Path
    pooling: Pooling

    def digest(self) -> str:
        size = self.model.stat().st_size
        sha = hashlib.sha256(str(size).encode())
        with self.model.open("rb") as f:
            sha.update(f.read(DIGEST_EDGE_BYTES))
            if size > DIGEST_EDGE_BYTES:
                f.seek(max(DIGEST_EDGE_BYTES, size - DIGEST_EDGE_BYTES))
                sha.update(f.read())
        return sha.hexdigest()[:12]


def _first(root: Path, candidates: tuple[str, ...]) -> Path | None:
    for candidate in candidates:
        path = root / candidate
        if path.is_file() and path.stat().st_size > 0:
            return path
    return None


def _pooling(root: Path, default: Pooling) -> Pooling:
    config = root / "1_Pooling" / "config.json"
    if not config.is_file():
        return default
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError):
        return default
    if data.get("pooling_mode_cls_token"):
        return "cls"
    if data.get("pooling_mode_mean_tokens"):
        return "mean"
    return default


def find_model_files(root: Path, spec: ModelSpec, *, fix: str) -> ModelFiles:
    """The model's files under ``root``; ``fix`` is the advice appended to any error."""
    if not root.is_dir():
        raise ModelDirError(f"model directory {root} does not exist. Fix: {fix}")
    model = _first(root, MODEL_CANDIDATES)
    if model is None:
        raise ModelDirError(
            f"model directory {root} has no ONNX model (looked for {', '.join(MODEL_CANDIDATES)})."
            f" Fix: {fix}"
        )
    tokenizer = _first(root, TOKENIZER_CANDIDATES)
    if tokenizer is None:
        raise ModelDirError(
            f"model directory {root} has no tokenizer.json (looked for "
            f"{', '.join(TOKENIZER_CANDIDATES)}). Fix: {fix}"
        )
    return ModelFiles(root, model, tokenizer, _pooling(root, spec.pooling))
