"""Known Hugging Face models and how to run them (files, pooling, prefixes, token limits).

A name here is also the directory under ``KEYMEM_HOME/models`` and the model part of the
embedder's fingerprint. Any other ONNX export works too through a path variable; it then runs
with the defaults below (mean pooling unless its ``1_Pooling/config.json`` says CLS).
File lists follow each repository's layout as published; they cannot be checked from machines
without the hub, so a changed layout shows up as a clear download error, not a crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Pooling = Literal["cls", "mean"]
Role = Literal["embedder", "reranker"]
# Token limit we run at, not the model's maximum: bge-m3 accepts 8,192 tokens, but one such
# text takes seconds on two CPU cores; memories and keys are far shorter.
DEFAULT_MAX_TOKENS = 512


@dataclass(frozen=True)
class ModelSpec:
    name: str
    role: Role
    repo_id: str | None = None  # None: only usable from a local directory
    files: tuple[str, ...] = ("onnx/model.onnx", "tokenizer.json")
    revision: str | None = None
    pooling: Pooling = "mean"
    max_tokens: int = DEFAULT_MAX_TOKENS
    # Prefixes some models were trained with; keys are matched against queries, so a key
    # gets the query prefix.
    query_prefix: str = ""
    passage_prefix: str = ""


KNOWN_MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            "bge-m3",
            "embedder",
            "BAAI/bge-m3",
            files=("onnx/model.onnx", "onnx/model.onnx_data", "onnx/tokenizer.json"),
            pooling="cls",
        ),
        ModelSpec(
            "multilingual-e5-small",
            "embedder",
            "intfloat/multilingual-e5-small",
            query_prefix="query: ",
            passage_prefix="passage: ",
        ),
        ModelSpec(
            "multilingual-e5-base",
            "embedder",
            "intfloat/multilingual-e5-base",
            query_prefix="query: ",
            passage_prefix="passage: ",
        ),
        ModelSpec(
            "all-MiniLM-L6-v2", "embedder", "sentence-transformers/all-MiniLM-L6-v2", max_tokens=256
        ),
        ModelSpec("ms-marco-MiniLM-L-6-v2", "reranker", "cross-encoder/ms-marco-MiniLM-L-6-v2"),
        # The official repository publishes PyTorch weights; if it carries no ONNX export the
        # download stops with that message, and an exported directory works through
        # KEYMEM_RERANK_MODEL_PATH.
        ModelSpec("bge-reranker-v2-m3", "reranker", "BAAI/bge-reranker-v2-m3"),
    )
}


def spec_for(name: str, role: Role) -> ModelSpec:
    """The registered spec, or defaults for a model known only by its directory."""
    spec = KNOWN_MODELS.get(name)
    if spec is not None:
        if spec.role != role:
            raise ValueError(f"{name} is a {spec.role} model, not an {role}")
        return spec
    return ModelSpec(name, role)
