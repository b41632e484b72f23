"""Open an ONNX model and its tokenizer the way every keymem model runs them.

Both the embedder and the cross-encoder need the same things: a CPU session with a bounded
thread count, a tokenizer that pads to the longest text in the batch (not to a fixed length a
file may ship with) and truncates at the limit we run at, and errors that name the directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from keymem.services.embedder.models.local import ModelDirError, ModelFiles

if TYPE_CHECKING:
    from tokenizers import Tokenizer

PAD_TOKEN_CANDIDATES = ("[PAD]", "<pad>")
# Upper bound on padded tokens per model run: keeps activations small and cache-friendly.
TOKENS_PER_RUN = 8192
# Texts are cut at this many characters per token of the limit before tokenising, so a
# megabyte of text never reaches the tokenizer (real text runs 2-5 characters per token).
CHARS_PER_TOKEN = 8
EXTRA_MODULES = ("onnxruntime", "tokenizers", "huggingface_hub", "filelock")


def require_models_extra(setting: str) -> None:
    """Fail with the install command, not an ImportError, when the ``models`` extra is absent."""
    import importlib.util

    missing = [m for m in EXTRA_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise RuntimeError(
            f"{setting} needs {', '.join(missing)}: install the models extra "
            "(pip install 'keymem[models]'), or use the offline defaults"
        )


def open_session(files: ModelFiles, threads: int, *, fix: str) -> Any:
    """An onnxruntime ``InferenceSession`` on the CPU."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # warnings about unused initialisers are noise here
    try:
        return ort.InferenceSession(str(files.model), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ModelDirError(
            f"{files.model} is not a loadable ONNX model ({type(exc).__name__}: {exc}). Fix: {fix}"
        ) from exc


def open_tokenizer(files: ModelFiles, max_tokens: int, *, fix: str) -> Tokenizer:
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(files.tokenizer))
    except Exception as exc:
        raise ModelDirError(
            f"{files.tokenizer} is not a readable tokenizer ({type(exc).__name__}: {exc})."
            f" Fix: {fix}"
        ) from exc
    shipped = tokenizer.padding
    if shipped is not None:
        pad_id, pad_token = int(shipped["pad_id"]), str(shipped["pad_token"])
    else:
        pad_token = next(
            (t for t in PAD_TOKEN_CANDIDATES if tokenizer.token_to_id(t) is not None), "[PAD]"
        )
        pad_id = tokenizer.token_to_id(pad_token) or 0
    # Dynamic padding: to the longest text of each batch, never to a fixed length.
    tokenizer.enable_padding(pad_id=pad_id, pad_token=pad_token)
    tokenizer.enable_truncation(max_length=max_tokens)
    return tokenizer


def length_groups(encodings: list[Any]) -> Iterator[tuple[list[int], int]]:
    """Indexes of ``encodings`` in runs of similar length, each with its longest real length.

    Sorting by length and cutting runs at ``TOKENS_PER_RUN`` padded tokens means a batch of
    short texts never pays for one long text's padding.
    """
    lengths = [sum(e.attention_mask) for e in encodings]
    order = sorted(range(len(encodings)), key=lengths.__getitem__)
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and (end - start + 1) * lengths[order[end]] <= TOKENS_PER_RUN:
            end += 1
        group = order[start:end]
        yield group, max(lengths[i] for i in group)
        start = end


def model_inputs(
    encodings: list[Any], length: int, accepted: set[str]
) -> dict[str, npt.NDArray[np.int64]]:
    """The BERT-style feed cut to ``length`` tokens; ``token_type_ids`` if the model takes it."""
    feed = {
        "input_ids": np.array([e.ids[:length] for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask[:length] for e in encodings], dtype=np.int64),
    }
    if "token_type_ids" in accepted:
        feed["token_type_ids"] = np.array([e.type_ids[:length] for e in encodings], dtype=np.int64)
    return feed
