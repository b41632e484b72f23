"""Where a model's files come from: the user's directory if one is configured, else a download.

Both paths end in ``find_model_files``, so a bad directory fails the same way with advice that
fits how it got there (fix your path, or delete the download to fetch it again).
"""

from __future__ import annotations

from pathlib import Path

from keymem.services.embedder.models.download import ensure_downloaded, models_dir
from keymem.services.embedder.models.local import ModelFiles, find_model_files
from keymem.services.embedder.models.registry import ModelSpec


def resolve_model_dir(
    spec: ModelSpec, path: Path | None, home: Path, path_variable: str
) -> ModelFiles:
    """A model's files: from the user's directory if given, else downloaded under the home."""
    if path is not None:
        fix = (
            f"set {path_variable} to a directory holding model.onnx (or onnx/model.onnx) and "
            f"tokenizer.json, or unset it to download {spec.name} into {models_dir(home)}"
        )
        return find_model_files(path, spec, fix=fix)
    target = ensure_downloaded(spec, home)
    fix = f"delete {target} to download it again, or set {path_variable} to a good copy"
    return find_model_files(target, spec, fix=fix)
