"""Graph service figures for docs/BENCHMARKS.md at a given store size.

    python -m benchmarks.graph_bench --memories 10000 [--seconds 3] [--json]

Builds a synthetic store in a temporary KEYMEM_HOME (3-6 keys per memory drawn Zipf-like from
a per-namespace vocabulary, so keys are shared and some become hubs; 4 namespaces; random unit
512-d key vectors, as the embedder would send), loading it with durable ``remember_batch``
calls of 200 items in-process. Then it measures, in the same run:

- start-up: reopening the file in-process (load + index build), and the real process
  (``python -m keymem.services graph``) from spawn to its first answered ping through the router;
- RSS of that process;
- through the router over ipc (one client, closed loop): ``remember`` (durable, new memory with
  3-6 existing keys), ``remember_batch`` of 100, ``read_key``, ``read_memory`` (via a key),
  ``match_keys`` (vector + text); and ``remember`` from 8 concurrent clients (group commit);
- ``match_keys`` handler time in-process (the graph's own cost, no wire).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from keymem.protocol.endpoints import ipc_endpoints, prepare_run_dir
from keymem.services.graph import GraphService, matching
from keymem.services.graph.service import BLAS_THREADS
from keymem.services.stack import InprocStack
from keymem.store.database import graph_path

DIM = 512
NAMESPACES = 4
KEYS_PER_MEMORY = (3, 6)
MEMORIES_PER_KEY = 12  # vocabulary size = memories per namespace * 4.5 / this
ZIPF_EXPONENT = 0.9
LOAD_BATCH = 200
WIRE_BATCH = 100
QUERY_WORDS = 6
START_TIMEOUT_S = 120.0
CONCURRENT_CLIENTS = 8
IN_PROCESS_WRITES = 300


# The dev files the recall benchmarks read (../shared/data beside the checkout).
DEV_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def agent_key_texts(data: Path = DEV_DATA) -> list[str]:
    """The distinct keys agents wrote for the memories of the dev files (locomo_agentkeys and
    its kin), sorted: real key texts for a stream that coins keys."""
    texts = {
        key
        for path in data.glob("*.dev.json")
        for memory in json.loads(path.read_text())["memories"]
        for key in memory.get("keys") or ()
    }
    if not texts:
        raise FileNotFoundError(f"no dev file under {data} holds agent-written keys")
    return sorted(texts)


def vocabulary_size(memories: int) -> int:
    """Keys per namespace of the synthetic store of ``memories``."""
    return max(50, int(max(1, memories // NAMESPACES) * 4.5 / MEMORIES_PER_KEY))


class Synthetic:
    """Deterministic synthetic memories over shared, Zipf-popular keys.

    With ``coined_per_memory`` each memory also gets on average that many keys no store holds
    (Poisson), as an agent's writes do: its keys name people and topics the store has not seen
    (1.6 new keys a memory in the second half of locomo_agentkeys' conversations). Their
    texts pair two of ``coined_texts`` (real agent keys, shuffled), each pair once a stream. The
    Zipf stream alone coins a key only where its draw falls past the store's vocabulary, which
    depends on the store's size (0.002 a memory at 10k, 0.047 at 1M).
    """

    def __init__(
        self,
        memories: int,
        seed: int = 1,
        coined_per_memory: float = 0.0,
        coined_texts: Sequence[str] = (),
    ) -> None:
        if coined_per_memory and len(coined_texts) < 2:
            raise ValueError("coined keys need at least two texts to pair")
        self.rng = np.random.default_rng(seed)
        # draws of their own, so the keys a stream shares with the store stay the same
        self.coin_rng = np.random.default_rng([seed, 1])
        self.coined_per_memory = coined_per_memory
        order = self.coin_rng.permutation(len(coined_texts))  # neighbours unrelated
        self.coined_texts = [coined_texts[i] for i in order.tolist()]
        self.coined = 0
        vocabulary = vocabulary_size(memories)
        self.namespaces = [f"ns{i}" for i in range(NAMESPACES)]
        self.words = {
            ns: [f"{ns} concept {j}" for j in range(vocabulary)] for ns in self.namespaces
        }
        raw = self.rng.standard_normal((NAMESPACES, vocabulary, DIM)).astype(np.float32)
        self.vectors = raw / np.linalg.norm(raw, axis=2, keepdims=True)
        weights = 1.0 / np.arange(1, vocabulary + 1) ** ZIPF_EXPONENT
        self.popularity = weights / weights.sum()
        self.counter = 0

    def item(self) -> dict[str, Any]:
        ns_index = self.counter % NAMESPACES
        namespace = self.namespaces[ns_index]
        count = int(self.rng.integers(KEYS_PER_MEMORY[0], KEYS_PER_MEMORY[1] + 1))
        picks = self.rng.choice(len(self.popularity), size=count, replace=False, p=self.popularity)
        keys = [self.words[namespace][j] for j in picks]
        vectors = self.vectors[ns_index, picks]
        if self.coined_per_memory:
            coined = self._coined(int(self.coin_rng.poisson(self.coined_per_memory)))
            keys += coined
            vectors = np.vstack([vectors, self._unit_vectors(len(coined))])
        self.counter += 1
        return {
            "content": f"synthetic memory {self.counter} about {' and '.join(keys)}",
            "keys": keys,
            "key_vectors": vectors,
            "namespace": namespace,
        }

    def _coined(self, count: int) -> list[str]:
        """``count`` key texts this stream has not coined before: the n-th pairs text n with
        the text n // len(texts) + 1 places after it."""
        texts, size = self.coined_texts, len(self.coined_texts)
        coined = []
        for n in range(self.coined, self.coined + count):
            first, step = n % size, n // size % (size - 1) + 1
            coined.append(f"{texts[first]} {texts[(first + step) % size]}")
        self.coined += count
        return coined

    def _unit_vectors(self, count: int) -> np.ndarray:
        raw = self.coin_rng.standard_normal((count, DIM)).astype(np.float32)
        unit: np.ndarray = raw / np.linalg.norm(raw, axis=1, keepdims=True)
        return unit

    def query(self) -> dict[str, Any]:
        ns_index = int(self.rng.integers(NAMESPACES))
        j = int(self.rng.choice(len(self.popularity), p=self.popularity))
        noisy = self.vectors[ns_index, j] + 0.5 * self.rng.standard_normal(DIM).astype(np.float32)
        words = " ".join(f"word{int(w)}" for w in self.rng.integers(0, 1000, QUERY_WORDS))
        return {
            "namespace": self.namespaces[ns_index],
            "vector": (noisy / np.linalg.norm(noisy)).astype(np.float32),
            "text": f"{words} {self.words[self.namespaces[ns_index]][j]}",
            "top_k": 10,
            "learn": False,
        }


def _percentiles(samples_s: list[float], cpu_s: list[float] | None = None) -> dict[str, float]:
    ms = np.asarray(samples_s) * 1000
    out = {
        "n": len(ms),
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
        "per_s": round(len(ms) / float(ms.sum() / 1000), 1),
    }
    if cpu_s:  # this process's CPU per call: what a contended box does not inflate
        out["cpu_p50_ms"] = round(float(np.percentile(np.asarray(cpu_s) * 1000, 50)), 3)
    return out


def _loop(seconds: float, call: Callable[[], Any], cpu: list[float] | None = None) -> list[float]:
    samples: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        started, cpu_started = time.perf_counter(), time.process_time()
        call()
        samples.append(time.perf_counter() - started)
        if cpu is not None:
            cpu.append(time.process_time() - cpu_started)
    return samples


def _local(seconds: float, call: Callable[[], Any]) -> dict[str, float]:
    """Latency of an in-process call, with its CPU time."""
    cpu: list[float] = []
    return _percentiles(_loop(seconds, call, cpu), cpu)


def build(home: Path, data: Synthetic, memories: int) -> dict[str, Any]:
    graph = GraphService(graph_path(home))
    started = time.perf_counter()
    for start in range(0, memories, LOAD_BATCH):
        items = [data.item() for _ in range(min(LOAD_BATCH, memories - start))]
        graph.remember_batch({"items": items})
    seconds = time.perf_counter() - started
    counts = graph.counts({})
    graph.close()
    return {
        "memories": counts["memories"],
        "keys": counts["keys"],
        "links": counts["links"],
        "load_batched_per_s": round(memories / seconds, 1),
        "build_s": round(seconds, 1),
    }


def _timed_writes(graph: GraphService, data: Synthetic) -> dict[str, Any]:
    """Durable single writes in-process, wall and CPU: the CPU part is what contention hides."""
    out: dict[str, Any] = {}
    graph.remember(data.item())  # builds the lazy dedup index outside the measurement
    items = [data.item() for _ in range(IN_PROCESS_WRITES)]
    memory_ids = list(graph.state.memories)[:IN_PROCESS_WRITES]
    reads = [
        {
            "memory_id": m,
            "via_key_id": next(iter(graph.state.mem_links[m])),
            "namespace": graph.state.memories[m].namespace,  # by id: in its namespace only
        }
        for m in memory_ids
    ]
    for name, method, bodies in (
        ("remember", graph.remember, items),
        ("read_memory_via_key", graph.read_memory, reads),
    ):
        started, cpu_started = time.perf_counter(), time.process_time()
        for body in bodies:
            method(body)
        out[f"{name}_durable"] = {
            "n": len(bodies),
            "wall_ms": round((time.perf_counter() - started) / len(bodies) * 1000, 3),
            "cpu_ms": round((time.process_time() - cpu_started) / len(bodies) * 1000, 3),
        }
    return out


def in_process(home: Path, data: Synthetic, seconds: float) -> dict[str, Any]:
    started, cpu_started = time.perf_counter(), time.process_time()
    graph = GraphService(graph_path(home))
    reopen_s = time.perf_counter() - started
    reopen_cpu_s = time.process_time() - cpu_started
    try:
        queries = [data.query() for _ in range(200)]
        position = iter(range(10**9))

        def match() -> Any:
            return graph.match_keys(queries[next(position) % len(queries)])

        match_stats = _local(seconds, match)
        hub = max(graph.state.key_links, key=lambda k: len(graph.state.key_links[k]))
        hub_size = len(graph.state.key_links[hub])
        hub_namespace = graph.state.keys[hub].namespace
        read_hub = _local(
            seconds / 2, lambda: graph.read_key({"key_id": hub, "namespace": hub_namespace})
        )
        seeds = list(graph.state.memories)[:1]
        namespace = graph.state.memories[seeds[0]].namespace
        expand = _local(
            seconds / 2,
            lambda: matching.expand(
                graph.state, {"seeds": {seeds[0]: 1.0}, "namespace": namespace}, time.time()
            ),
        )
        writes = _timed_writes(graph, data)
        # every by-id read names its namespace (a namespace is a boundary)
        sample_keys = [
            (key.id, key.namespace)
            for key in list(graph.state.keys.values())[:: max(1, len(graph.state.keys) // 500)]
        ]
        sample_memories = list(graph.state.memories)[:: max(1, len(graph.state.memories) // 500)]
        vias = {
            m: (next(iter(graph.state.mem_links[m])), graph.state.memories[m].namespace)
            for m in sample_memories
        }
    finally:
        graph.close()
    return {
        "reopen_load_s": round(reopen_s, 2),
        "reopen_load_cpu_s": round(reopen_cpu_s, 2),
        "match_keys_handler": match_stats,
        "read_key_largest_hub": {**read_hub, "hub_memories": hub_size},
        "expand_2_hops_handler": expand,
        **writes,
        "sample_keys": sample_keys,
        "vias": vias,
    }


def over_the_wire(
    home: Path, data: Synthetic, seconds: float, sample: dict[str, Any]
) -> dict[str, Any]:
    endpoints = ipc_endpoints(home)
    prepare_run_dir(endpoints)
    env = {**os.environ, "KEYMEM_HOME": str(home), "KEYMEM_LOG_LEVEL": "WARNING"}
    with InprocStack(endpoints=endpoints) as stack:
        client = stack.client(timeout_ms=60_000)
        started = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-m", "keymem.services", "graph"], env=env)
        try:
            while True:
                try:
                    client.call("graph", "ping", timeout_ms=500)
                    break
                except Exception:
                    if (
                        time.perf_counter() - started > START_TIMEOUT_S
                        or process.poll() is not None
                    ):
                        raise
                    time.sleep(0.02)
            start_s = time.perf_counter() - started
            rss_mb = client.call("graph", "stats")["rss_bytes"] / 2**20
            keys = sample["sample_keys"]
            vias = list(sample["vias"].items())
            rng = np.random.default_rng(5)
            results = {
                "process_start_s": round(start_s, 2),
                "rss_mb": round(rss_mb, 1),
                "remember": _percentiles(
                    _loop(seconds, lambda: client.call("graph", "remember", data.item()))
                ),
            }
            results[f"remember_{CONCURRENT_CLIENTS}_clients"] = _concurrent_remembers(
                stack, data, seconds
            )
            batch = _loop(
                seconds,
                lambda: client.call(
                    "graph", "remember_batch", {"items": [data.item() for _ in range(WIRE_BATCH)]}
                ),
            )
            results["remember_batch_100"] = {
                **_percentiles(batch),
                "items_per_s": round(len(batch) * WIRE_BATCH / sum(batch), 1),
            }

            def read_key() -> Any:
                key_id, namespace = keys[int(rng.integers(len(keys)))]
                return client.call("graph", "read_key", {"key_id": key_id, "namespace": namespace})

            results["read_key"] = _percentiles(_loop(seconds, read_key))

            def read_memory() -> Any:
                memory_id, (via, namespace) = vias[int(rng.integers(len(vias)))]
                return client.call(
                    "graph",
                    "read_memory",
                    {"memory_id": memory_id, "via_key_id": via, "namespace": namespace},
                )

            results["read_memory"] = _percentiles(_loop(seconds, read_memory))
            queries = [data.query() for _ in range(200)]
            results["match_keys"] = _percentiles(
                _loop(
                    seconds,
                    lambda: client.call(
                        "graph", "match_keys", queries[int(rng.integers(len(queries)))]
                    ),
                )
            )
            return results
        finally:
            process.terminate()
            process.wait(30)


def _concurrent_remembers(stack: InprocStack, data: Synthetic, seconds: float) -> dict[str, Any]:
    """Closed-loop remember from several clients at once: what group commit buys."""
    bodies = [data.item() for _ in range(20_000)]
    counter = iter(range(len(bodies)))
    lock = threading.Lock()
    done: list[float] = []

    def run() -> None:
        client = stack.client(timeout_ms=60_000)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            with lock:
                body = bodies[next(counter)]
            started = time.perf_counter()
            client.call("graph", "remember", body)
            with lock:
                done.append(time.perf_counter() - started)

    threads = [threading.Thread(target=run) for _ in range(CONCURRENT_CLIENTS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    stats = _percentiles(done)
    stats["per_s"] = round(len(done) / elapsed, 1)
    return stats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=3.0, help="per measured operation")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    threadpool_limits(limits=BLAS_THREADS)  # as the graph service process does
    home = Path(tempfile.mkdtemp(prefix="km-gb-", dir="/tmp"))
    try:
        data = Synthetic(args.memories)
        report: dict[str, Any] = {"memories_requested": args.memories}
        report["build"] = build(home, data, args.memories)
        local = in_process(home, data, args.seconds)
        report["wire"] = over_the_wire(home, data, args.seconds, local)
        local.pop("sample_keys")
        local.pop("vias")
        report["in_process"] = local
        report["file_mb"] = round(graph_path(home).stat().st_size / 2**20, 1)
        report["load_average_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(report, indent=2 if args.json else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
