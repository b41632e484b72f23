"""The graph's CPU per batched memory by stage, in process, on a copy of a store.

    python -m benchmarks.batch_stages --store /tmp/km-scale5/store-1000000/graph.duckdb
        --memories 1000000 [--batches 20] [--pace-s S] [--key-ann-min-keys N] [--key-ann-cache DIR]

Opens a copy of the graph file with ``GraphService``, waits until every namespace's
approximate key index serves (as a deployment does before it answers: at 1M a first build
takes minutes; ``--key-ann-cache DIR`` keeps the built indexes there and reuses them), then
sends ``--batches`` ``remember_batch`` of 100 from ``benchmarks.graph_bench.Synthetic`` (another
stream than the store's) as the memory service sends them: without vectors, and when the graph
refuses one for keys it does not hold, again with those keys' vectors (``embedded_keys``); runs
the worker's fold and checkpoint timers between them. Reports CPU ms per memory: ``refused``
(the first tries the graph refused, naming keys), ``write`` (the acknowledged write: parse,
keys, links, hints, the log's append), ``timers`` (the fold into DuckDB, and the checkpoints,
also given on their own), the checkpoint count and the share of batches refused once.
``--pace-s S`` waits S before each batch, as batches through a deployment arrive (~0.1 s apart
from one client on a quiet box): the write-behind timer then sees the gaps a deployment's does.
``--key-ann-min-keys`` lowers the key index threshold, so a small store serves its keys from the
index as a large one does. Run it nice'd; compare trees by running it with each tree first on
``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.graph_bench import Synthetic
from keymem.protocol.errors import BadRequest
from keymem.protocol.worker import Timer
from keymem.services import config as cfg
from keymem.services.graph import GraphService, keyann
from keymem.services.graph import service as graph_service
from keymem.store.database import graph_path

BATCH = 100
KEY_ANN_POLL_S = 1.0


def _key_indexes_serve(graph: GraphService) -> bool:
    graph.key_ann_tick()
    large = [
        index
        for index in graph.state.indexes.values()
        if index.concept_count() >= graph.key_ann.min_keys > 0
    ]
    return all(i.approximate is not None and i.approximate.ready() for i in large)


def _by_text(items: list[dict[str, Any]]) -> dict[str, Any]:
    """A batch body as the memory service first sends it: no vector, an idempotency key."""
    return {"items": items, "idempotency_key": uuid.uuid4().hex}


def _with_embedded(graph: GraphService, body: dict[str, Any], refused: Any) -> dict[str, Any]:
    """``body`` again after the graph's refusal, with a vector for each text it named (any unit
    vector: those keys are new either way), in the store's space."""
    named = refused.detail["unheld_keys"]
    width = graph.state.dim or 1
    vectors = np.tile(np.eye(1, width, dtype=np.float32), (len(named), 1))
    table: dict[str, Any] = {"embedded_keys": named, "embedded_vectors": vectors}
    if graph.state.fingerprint is not None:
        table["fingerprint"] = graph.state.fingerprint
    return {**body, **table}


def measure(
    store: Path,
    memories: int,
    batches: int,
    key_ann_min_keys: int,
    cache: Path | None,
    pace_s: float,
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="km-batch-stages-", dir="/tmp"))
    try:
        shutil.copy(store, graph_path(work))
        if cache is not None and cache.exists():
            shutil.copytree(cache, work / keyann.DIRECTORY)
        started = time.perf_counter()
        graph = GraphService(graph_path(work), key_ann_min_keys=key_ann_min_keys)
        report: dict[str, Any] = {
            "memories": memories,
            "load_s": round(time.perf_counter() - started, 1),
        }
        started = time.perf_counter()
        while not _key_indexes_serve(graph):
            time.sleep(KEY_ANN_POLL_S)
        report["key_indexes_s"] = round(time.perf_counter() - started, 1)
        if cache is not None and not cache.exists() and (work / keyann.DIRECTORY).exists():
            shutil.copytree(work / keyann.DIRECTORY, cache)
        data = Synthetic(memories, seed=memories + 17)

        def items() -> list[dict[str, Any]]:
            return [
                {k: v for k, v in data.item().items() if k != "key_vectors"} for _ in range(BATCH)
            ]

        first = _by_text(items())
        (refused,) = graph.write_group(graph.prepare_remember_batch, [first])
        if isinstance(refused, BadRequest):
            graph.write_group(graph.prepare_remember_batch, [_with_embedded(graph, first, refused)])
        graph.store.checkpoint()  # the session's first write, and the dedup table built
        cpu = {"refused": 0.0, "write": 0.0, "timers": 0.0, "checkpoints": 0.0}
        checkpoints = refusals = 0
        checkpoint = graph.store.checkpoint

        def counted_checkpoint() -> None:
            nonlocal checkpoints
            checkpoints += 1
            spent = time.process_time()
            checkpoint()
            cpu["checkpoints"] += time.process_time() - spent

        graph.store.checkpoint = counted_checkpoint  # type: ignore[method-assign]
        timers = [
            Timer(graph_service.WRITE_BEHIND_INTERVAL_S, graph.fold_due),
            Timer(graph_service.CHECKPOINT_CHECK_INTERVAL_S, graph.checkpoint_due),
        ]
        for batch in [items() for _ in range(batches)]:
            time.sleep(pace_s)  # the client's, the MCP server's and the router's part
            body = _by_text(batch)
            spent = time.process_time()
            (result,) = graph.write_group(graph.prepare_remember_batch, [body], "remember_batch")
            if isinstance(result, BadRequest):
                refusals += 1
                cpu["refused"] += time.process_time() - spent
                body = _with_embedded(graph, body, result)
                spent = time.process_time()
                (result,) = graph.write_group(
                    graph.prepare_remember_batch, [body], "remember_batch"
                )
            cpu["write"] += time.process_time() - spent
            assert isinstance(result, dict), result
            spent = time.process_time()
            for timer in timers:  # as the worker's serving loop runs them between requests
                if time.monotonic() >= timer.due_at:
                    timer.due_at = time.monotonic() + timer.interval_s
                    timer.action()
            cpu["timers"] += time.process_time() - spent
        spent = time.process_time()
        graph.flush_due()
        cpu["timers"] += time.process_time() - spent
        graph.store.checkpoint = checkpoint  # type: ignore[method-assign]
        graph.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    written = batches * BATCH
    report["cpu_ms_per_memory"] = {k: round(v / written * 1000, 3) for k, v in cpu.items()}
    report["checkpoints"] = checkpoints
    report["batches_refused_once"] = round(refusals / batches, 2)
    report["load_average"] = round(os.getloadavg()[0], 1)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", type=Path, required=True, help="a graph file (copied)")
    parser.add_argument("--memories", type=int, required=True, help="the store's size")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument(
        "--key-ann-min-keys", type=int, default=cfg.KEY_ANN_MIN_KEYS.default, help="0: none"
    )
    parser.add_argument("--key-ann-cache", type=Path, help="keep and reuse built key indexes")
    parser.add_argument(
        "--pace-s", type=float, default=0.0, help="wait before each batch, as a deployment's do"
    )
    args = parser.parse_args()
    report = measure(
        args.store,
        args.memories,
        args.batches,
        args.key_ann_min_keys,
        args.key_ann_cache,
        args.pace_s,
    )
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
