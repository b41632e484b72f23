"""The lexicon's first index of a large store, and its queries afterwards, in one process.

    python -m benchmarks.lexicon_first_index --memories 100000 1000000 [--json]

A ``FeedFollower`` over an empty index (no cache: a first index) pages a feed of synthetic
memories shaped like the 1M store's (benchmarks/graph_bench.py: four namespaces, 2-6 Zipf
picks of 88,000 concept keys per memory, "synthetic memory N about ..."), answered in process,
so the figures are the lexicon's own: memories/s (wall and CPU), the process's RSS before and
at its peak, then 300 queries of the store's shape (six absent words and one concept key) for
the top 10 and 50, in CPU time (this box is shared; wall time tracks the load). Run it once per
tree (``PYTHONPATH`` at a ``git archive`` of each) to compare.

With ``--store DIR`` (a ``benchmarks.scale_store`` store, e.g. /tmp/km-scale5/store-1000000;
copied, never changed) it runs the real deployment on a copy instead: ``keymem up``, the
lexicon's first index from the graph's feed, its save and the swap to the mapped file, the
lexicon processes' RSS / PSS, its query p50 / p99 through the router, ``keymem down`` (the
lexicon's stop) and ``up`` again (the cache loaded, nothing re-indexed), RSS / PSS again, and a
worker's ``kill -9`` to serving every memory again. Take ``flock /tmp/km1m.lock`` at 1M.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import mmap
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from benchmarks.deployment import bench_home
from benchmarks.recall_bench import LIVENESS
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.protocol.errors import KeymemError
from keymem.services.lexicon import cache
from keymem.services.lexicon.index import LexiconIndex, NamespaceIndex
from keymem.services.lexicon.journal import Journal
from keymem.services.lexicon.sync import FeedFollower
from keymem.services.lexicon.tokenizer import Tokenizer, shared_tokenizer
from keymem.store.database import graph_path

CONCEPTS = 88_000
NAMESPACES = 4
KEYS_PER_MEMORY = (2, 6)
QUERIES = 300
QUERY_WORDS = 6
SLICE_S = 0.25  # the service's sync slice
SEED = 20261202
MB = 2**20
UP_TIMEOUT_S = "1800"
DEPLOYMENT_GIVE_UP_S = 1_800.0
DEPLOYMENT_POLL_S = 0.5


class SyntheticFeed:
    """The graph's feed contract over ``memories`` generated on demand (constant memory)."""

    def __init__(self, memories: int) -> None:
        rng = np.random.default_rng(SEED)
        weights = 1.0 / np.arange(1, CONCEPTS + 1)
        self.popularity = weights / weights.sum()
        self.memories = memories
        self.picks = rng.choice(CONCEPTS, size=(memories, KEYS_PER_MEMORY[1]), p=self.popularity)
        self.counts = rng.integers(KEYS_PER_MEMORY[0], KEYS_PER_MEMORY[1] + 1, size=memories)

    def document(self, i: int) -> dict[str, Any]:
        namespace = f"ns{i % NAMESPACES}"
        keys = [f"{namespace} concept {j}" for j in self.picks[i, : self.counts[i]].tolist()]
        content = f"synthetic memory {i + 1} about {' and '.join(keys)}"
        return {"id": f"{i:012x}", "namespace": namespace, "content": content, "keys": keys}

    def __call__(self, method: str, body: dict[str, Any], timeout_ms: int) -> dict[str, Any]:
        if method == "feed_head":
            return {"seq": 1, "epoch": "bench"}
        if method == "feed_since":
            return {"events": [], "head": 1, "epoch": "bench"}
        after = body.get("after")
        start = 0 if after is None else int(after, 16) + 1
        end = min(self.memories, start + int(body["limit"]))
        return {
            "documents": [self.document(i) for i in range(start, end)],
            "next": f"{end - 1:012x}" if end < self.memories else None,
        }


def _cpu_ms(samples: list[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000
    p50, p99 = np.percentile(ms, [50, 99]).tolist()
    return {"cpu_p50_ms": round(p50, 2), "cpu_p99_ms": round(p99, 2), "max_ms": round(ms.max(), 1)}


def _array_mb(arrays: list[np.ndarray[Any, Any]]) -> dict[str, float]:
    """MB of ``arrays`` split by where their bytes live: the heap, or a mapped file."""
    heap = mapped = 0
    for array in arrays:
        owner: Any = array
        while isinstance(owner, np.ndarray) and owner.base is not None:
            owner = owner.base
        if isinstance(owner, memoryview) and isinstance(owner.obj, mmap.mmap):
            mapped += array.nbytes
        else:
            heap += array.nbytes
    return {"heap_mb": round(heap / MB, 1), "mapped_mb": round(mapped / MB, 1)}


def _vocabulary_mb(space: NamespaceIndex) -> float:
    """The term dictionary's Python objects: the dict, the list and each term's str."""
    strs = sum(sys.getsizeof(term) for term in space.terms)
    return (sys.getsizeof(space.vocab) + sys.getsizeof(space.terms) + strs) / MB


def footprint(index: LexiconIndex) -> dict[str, Any]:
    """Where the index's memory is: document table, per-namespace rows and postings,
    per-slot arrays, term dictionaries (Python objects), the process's RSS / USS / PSS."""
    table = index.base
    rows, columns, slots = [], [], []
    vocabulary = 0.0
    for space in index.namespaces.values():
        rows += [space.base.ptr, space.base.tids, space.base.tfs, space.base.ids]
        base = space.postings.columns
        if base is not None:
            columns += [base.ptr, base.rows, base.tfs]
        slots += [space.alive, space.doc_len]
        vocabulary += _vocabulary_mb(space)
    memory = psutil.Process().memory_full_info()
    return {
        "table": _array_mb([table.ids, table.spaces, table.digests, index.base_alive]),
        "rows": _array_mb(rows),
        "columns": _array_mb(columns),
        "slots": _array_mb(slots),
        "vocabulary_mb": round(vocabulary, 1),
        "terms": sum(len(space.terms) for space in index.namespaces.values()),
        "rss_mb": round(memory.rss / MB),
        "uss_mb": round(memory.uss / MB),
        "pss_mb": round(memory.pss / MB),
    }


def measure(memories: int) -> dict[str, Any]:
    tokenizer = shared_tokenizer()
    feed = SyntheticFeed(memories)
    process = psutil.Process()
    rss_start = process.memory_info().rss
    journal_dir = Path(tempfile.mkdtemp(prefix="km-first-index-", dir="/tmp"))
    index = LexiconIndex()
    follower = FeedFollower(
        index,
        tokenizer.tokenize,
        feed,
        call_timeout_ms=1_000,
        retry_after_s=1.0,
        journal=Journal(journal_dir),
    )
    started, cpu = time.perf_counter(), time.process_time()
    peak = rss_start
    try:
        while not follower.consistent:
            follower.tick(SLICE_S)
            peak = max(peak, process.memory_info().rss)
    finally:
        shutil.rmtree(journal_dir, ignore_errors=True)
    wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu
    report: dict[str, Any] = {
        "memories": memories,
        "indexed": len(index),
        "wall_s": round(wall_s, 1),
        "cpu_s": round(cpu_s, 1),
        "per_s_wall": round(memories / wall_s),
        "per_s_cpu": round(memories / cpu_s),
        "rss_start_mb": round(rss_start / MB),
        "rss_peak_mb": round(peak / MB),
        "rss_end_mb": round(process.memory_info().rss / MB),
        "ru_maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "load": [round(x, 1) for x in os.getloadavg()],
    }
    report["after_index"] = footprint(index)
    _trim()
    report["after_trim"] = footprint(index)
    report.update(_queries(index, tokenizer, feed))
    cache_dir = Path(tempfile.mkdtemp(prefix="km-first-index-cache-", dir="/tmp"))
    try:
        path = cache.cache_path(cache_dir)
        started, cpu = time.perf_counter(), time.process_time()
        info = cache.save(path, index, tokenizer="bench", epoch="bench", seq=1)
        report["save"] = {
            "wall_s": round(time.perf_counter() - started, 2),
            "cpu_s": round(time.process_time() - cpu, 2),
            "bytes_mb": round(info.bytes / MB),
        }
        del index, follower
        gc.collect()
        _trim()
        report["rss_without_index_mb"] = round(process.memory_info().rss / MB)
        loaded = LexiconIndex()
        started, cpu = time.perf_counter(), time.process_time()
        cache.load(path, loaded, tokenizer="bench")
        report["load"] = {
            "wall_s": round(time.perf_counter() - started, 2),
            "cpu_s": round(time.process_time() - cpu, 2),
        }
        loaded_queries = _queries(loaded, tokenizer, feed)
        report["after_load"] = footprint(loaded)
        report["loaded"] = loaded_queries
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    report["load_end"] = [round(x, 1) for x in os.getloadavg()]
    return report


def _trim() -> None:
    """Hand the heap's free pages back to the OS (glibc keeps them after large frees)."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def _query_texts(feed: SyntheticFeed) -> list[tuple[str, str]]:
    """The ``QUERIES`` queries of the store's shape, (namespace, text), the same every run."""
    rng = np.random.default_rng(SEED + 1)
    texts = []
    for _ in range(QUERIES):
        namespace = f"ns{int(rng.integers(NAMESPACES))}"
        words = " ".join(f"word{int(w)}" for w in rng.integers(0, 1000, QUERY_WORDS))
        concept = int(rng.choice(CONCEPTS, p=feed.popularity))
        texts.append((namespace, f"{words} {namespace} concept {concept}"))
    return texts


def _queries(index: LexiconIndex, tokenizer: Tokenizer, feed: SyntheticFeed) -> dict[str, Any]:
    """CPU per query: 300 of the store's shape, a first (cold) pass and warm passes."""
    queries = [
        (namespace, Counter(tokenizer.tokenize(text))) for namespace, text in _query_texts(feed)
    ]
    report = {}
    for label, top_n in (("first_top10", 10), ("top10", 10), ("top50", 50)):
        samples = []
        for namespace, query in queries:
            t0 = time.thread_time()
            index.top(namespace, query, top_n)
            samples.append(time.thread_time() - t0)
        report[label] = _cpu_ms(samples)
    return report


def _lexicon_memory(client: Client) -> dict[str, Any]:
    """RSS / PSS of the lexicon's worker and of the parent that keeps Kiwi (shared by both)."""
    worker = psutil.Process(client.call("lexicon", "ping", timeout_ms=10_000)["pid"])
    report = {}
    for name, process in (("worker", worker), ("parent", worker.parent())):
        assert process is not None
        info = process.memory_full_info()
        report[name] = {
            "rss_mb": round(info.rss / MB),
            "pss_mb": round(info.pss / MB),
            "uss_mb": round(info.uss / MB),
        }
    return report


def _serving(client: Client, memories: int, old_pid: int | None = None) -> float:
    """Seconds until a lexicon worker (other than ``old_pid``) serves every memory."""
    started = time.monotonic()
    while time.monotonic() - started < DEPLOYMENT_GIVE_UP_S:
        try:
            if client.call("lexicon", "ping", timeout_ms=1_000)["pid"] != old_pid:
                stats = client.call("lexicon", "index_stats", timeout_ms=2_000)
                if stats["documents"] >= memories and stats["sync"]["phase"] == "live":
                    return round(time.monotonic() - started, 2)
        except KeymemError:
            pass
        time.sleep(DEPLOYMENT_POLL_S)
    raise TimeoutError("the lexicon did not serve every memory in time")


def _swapped(client: Client) -> float:
    """Seconds until the worker serves the cache it saved after its first index (mapped)."""
    started = time.monotonic()
    while time.monotonic() - started < DEPLOYMENT_GIVE_UP_S:
        with contextlib.suppress(KeymemError):
            state = client.call("lexicon", "index_stats", timeout_ms=2_000)["cache"]
            if "remap_s" in state:
                time.sleep(1.0)  # the serving thread swaps on its next tick
                return round(time.monotonic() - started, 2)
        time.sleep(DEPLOYMENT_POLL_S)
    raise TimeoutError("the lexicon did not save its first index in time")


def _router_queries(client: Client, feed: SyntheticFeed) -> dict[str, float]:
    samples = []
    for namespace, text in _query_texts(feed):
        body = {"query": text, "namespace": namespace}
        started = time.perf_counter()
        client.call("lexicon", "search", body, timeout_ms=10_000)
        samples.append((time.perf_counter() - started) * 1000)
    p50, p99 = np.percentile(samples, [50, 99]).tolist()
    return {"p50_ms": round(p50, 1), "p99_ms": round(p99, 1)}


def deployment(store: Path, *, down_at_once: bool) -> dict[str, Any]:
    """The real deployment on a copy of ``store`` (module docstring); ``down_at_once``: the
    `down` comes as soon as the first index serves (its save may still be running)."""
    memories = json.loads((store / "build.json").read_text())["memories"]
    feed = SyntheticFeed(1)  # only its query popularity (the store's Zipf over the concepts)
    report: dict[str, Any] = {"memories": memories, "load_start": os.getloadavg()}
    with bench_home("km-lx-") as home:
        home.env["KEYMEM_HEARTBEAT_LIVENESS"] = LIVENESS
        shutil.copy(store / "graph.duckdb", graph_path(home.home))
        started = time.perf_counter()
        home.keymem("up", "--timeout", UP_TIMEOUT_S)
        report["up_s"] = round(time.perf_counter() - started, 1)
        frontend = ipc_endpoints(home.home).frontend
        with Client(frontend) as client:
            report["first_index_s"] = _serving(client, memories)
            if not down_at_once:
                report["at_first_index"] = _lexicon_memory(client)
                report["until_swapped_s"] = _swapped(client)
                report["cache"] = client.call("lexicon", "index_stats")["cache"]
                report["swapped"] = _lexicon_memory(client)
                report["query"] = _router_queries(client, feed)
                report["after_queries"] = _lexicon_memory(client)
        started = time.perf_counter()
        home.keymem("down")
        report["down_s"] = round(time.perf_counter() - started, 1)
        report["lexicon_files"] = sorted(p.name for p in (home.home / "lexicon").iterdir())
        started = time.perf_counter()
        home.keymem("up", "--timeout", UP_TIMEOUT_S)
        report["up_again_s"] = round(time.perf_counter() - started, 1)
        with Client(frontend) as client:
            report["serving_again_s"] = _serving(client, memories)
            stats = client.call("lexicon", "index_stats")
            report["cache_again"] = stats["cache"]
            report["tokenized_again"] = stats["sync"]["tokenized"]
            report["restarted"] = _lexicon_memory(client)
            report["query_again"] = _router_queries(client, feed)
            report["restarted_after_queries"] = _lexicon_memory(client)
            old = client.call("lexicon", "ping")["pid"]
            os.kill(old, signal.SIGKILL)
            report["kill_9_to_serving_s"] = _serving(client, memories, old)
    report["load_end"] = os.getloadavg()
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--memories", type=int, nargs="+", default=[100_000])
    parser.add_argument("--store", type=Path, help="a built store: the real deployment on a copy")
    parser.add_argument(
        "--down-at-once", action="store_true", help="with --store: down right after the index"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    reports = (
        [deployment(args.store, down_at_once=args.down_at_once)]
        if args.store
        else [measure(m) for m in args.memories]
    )
    for report in reports:
        print(json.dumps(report, indent=2 if args.json else None), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
