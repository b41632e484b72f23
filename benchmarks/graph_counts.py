"""CPU per ``counts`` and per ``list_memories`` page on a built store, as the graph's serving
loop pays them (every other request waits meanwhile).

    python -m benchmarks.graph_counts --store /tmp/km-scale/store-100000 [--repeat 20]

It starts the graph from a copy of the store's file in this process (as
``benchmarks.graph_load`` does), then times, in CPU milliseconds per call (median of
``--repeat``): ``counts`` of every namespace, ``counts`` of one namespace, ``counts`` with
``detail`` and the first page of one namespace's ``list_memories``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from keymem.services.graph import rows, views
from keymem.services.graph.state import GraphState
from keymem.store.database import GraphStore, graph_path

HUB_MIN_LINKS = 50
REPEAT_DEFAULT = 20


def _cpu_ms(call: Callable[[], object], repeat: int) -> float:
    spent = []
    for _ in range(repeat):
        started = time.process_time()
        call()
        spent.append((time.process_time() - started) * 1000)
    return round(statistics.median(spent), 3)


def measure(store: Path, repeat: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="km-graph-counts-", dir="/tmp"))
    try:
        path = graph_path(work)
        shutil.copy(graph_path(store), path)
        opened = GraphStore(path)
        try:
            loaded = opened.load()
        finally:
            opened.close()
        rows.quarantine(loaded)
        state = GraphState(loaded, HUB_MIN_LINKS)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    now = time.time()
    largest = max(state.indexes, key=lambda ns: len(state.indexes[ns]))
    return {
        "store": str(store),
        "memories": len(state.memories),
        "namespaces": len(state.indexes),
        "counts_ms": _cpu_ms(lambda: views.counts(state, {}, now), repeat),
        "counts_one_namespace_ms": _cpu_ms(
            lambda: views.counts(state, {"namespace": largest}, now), repeat
        ),
        "counts_detail_ms": _cpu_ms(lambda: views.counts(state, {"detail": True}, now), repeat),
        "list_memories_ms": _cpu_ms(
            lambda: views.list_memories(state, {"namespace": largest}, now), repeat
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--store", type=Path, required=True, help="a built store's home")
    parser.add_argument("--repeat", type=int, default=REPEAT_DEFAULT, help="calls per figure")
    args = parser.parse_args()
    print(json.dumps(measure(args.store, args.repeat), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
