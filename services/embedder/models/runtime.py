"""Open an ONNX model and its tokenizer the way every keymem model runs them.

Both the embedder and the cross-encoder need the same things: a CPU session with a bounded
thread count, a tokenizer that pads to the longest text in the batch (not to a fixed length a
file may ship with) and truncates at the limit we run at, and errors that name the directory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from services.embedder.models.local import ModelDirError, ModelFiles

if TYPE_CHECKING:
    from tokenizers import Tokenizer

PAD_TOKEN_CANDIDATES = ("[PAD]", "<pad>")
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
