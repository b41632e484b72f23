"""A process that opens a passage store the way a reranker worker does, appends its own rows
and says which generations it saw (tests/test_reranker_passages.py). With ``stop_at`` it
stops itself (SIGSTOP) at one step of a rotation or an append, for the test to kill -9 it
there: ``new_index`` (a new generation's index made, its vectors not), ``previous_kept``
(the new generation made, the previous not yet deleted), ``previous_half`` (the previous's
index deleted, its vectors not), ``vectors_only`` (an append's vectors written, its index
not)."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from keymem.services.embedder.cache import Cached
from keymem.services.reranker.passages import PassageStore


def stop_at(owner: Any, name: str, nth: int, when: Callable[..., bool]) -> None:
    """Stop this process before the ``nth`` call of ``owner.name`` that ``when`` accepts."""
    real = getattr(owner, name)
    seen = [0]

    def stopping(*args: Any, **kwargs: Any) -> Any:
        if when(*args):
            seen[0] += 1
            if seen[0] == nth:
                os.kill(os.getpid(), signal.SIGSTOP)
        return real(*args, **kwargs)

    setattr(owner, name, stopping)


MOMENTS: dict[str, Callable[[], None]] = {
    "new_index": lambda: stop_at(
        os,
        "open",
        1,
        lambda path, *_: os.path.basename(path).startswith("vectors.") and not os.path.exists(path),
    ),
    "previous_kept": lambda: stop_at(pathlib.Path, "unlink", 1, lambda *_: True),
    "previous_half": lambda: stop_at(pathlib.Path, "unlink", 2, lambda *_: True),
    "vectors_only": lambda: stop_at(os, "write", 2, lambda *_: True),
}


def generation_numbers(store: PassageStore) -> list[int]:
    return [g.number for g in (store.previous, store.current) if g is not None]


def main() -> None:
    spec = json.loads(sys.argv[1])
    while time.time() < spec.get("start_at", 0):  # several workers starting together
        time.sleep(0.001)
    if "stop_at" in spec:
        MOMENTS[spec["stop_at"]]()
    store = PassageStore(pathlib.Path(spec["directory"]), spec["dim"], spec["min_rows"])
    started = generation_numbers(store)
    vector = np.full(spec["dim"], spec["seed"], np.float32)
    store.add(
        {f"worker {spec['seed']} row {i}": Cached(vector, False) for i in range(spec["rows"])}
    )
    print(json.dumps({"started": started, "after": generation_numbers(store)}), flush=True)
    store.close()


if __name__ == "__main__":
    main()
