"""Lexicon figures for docs/BENCHMARKS.md: query latency, update rate, restart time, RSS, and
rank-bm25 on the same corpus as the ratio to beat.

    python -m benchmarks.lexicon_scale --docs 10000 100000 [--seconds 5] [--json]

For each corpus size it:

1. builds a corpus of short memories (1-3 sentences drawn from ../shared/data when present,
   else synthetic text), tokenized with the service's tokenizer (each pool sentence once);
2. in process: indexes it document by document (update rate), times queries against the
   index alone, and times the same queries through ``rank_bm25.BM25Okapi`` (the reference);
3. writes the index as the lexicon's term cache, then runs the real processes over ipc: the
   router, the lexicon, and a *feed stand-in* for the graph (this module's ``serve-feed``: it
   answers the feed contract at the cache's epoch/seq, and can release more events on demand)
   - restart-to-ready: lexicon process spawn until it answers ``index_stats`` with every
     document, caught up to the head;
   - query p50/p99 with 1 and 8 client processes through the router, queries rotating;
   - update rate end to end: the stand-in releases new/corrected memories as feed events, timed
     until the lexicon's seq reaches the new head (Kiwi + feed + index);
   - the lexicon's RSS;
   - worker restart: ``kill -9`` of the worker forked from the process that keeps Kiwi
     (services/prefork.py) until a new one holds every document, caught up to the head (its
     cache plus the feed since), then the first query, and the new worker's RSS / USS / PSS;
     once right after a cache save, once with ``CATCH_UP_EVENTS`` written since.

``--bulk`` builds each corpus's index in vectorised passes (sentence term counts summed per
document) instead of document by document: what makes 1M documents a matter of seconds; the
per-document add rate and the rank-bm25 reference are then not measured. In process it also
times ``cache.load`` of the saved cache into an empty index, and the file's checksum alone.

The processes it starts get the environment a deployment gives its programs
(``catalog.PROGRAM_ENVIRONMENT``) unless this one sets a variable itself:
``NUMPY_MADVISE_HUGEPAGE=1 python -m benchmarks.lexicon_scale ...`` measures everything with
numpy's huge pages, as before keymem turned them off (``=0``: as deployed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints, prepare_run_dir
from keymem.protocol.errors import KeymemError
from keymem.protocol.stats import percentile
from keymem.protocol.worker import Service, Worker
from keymem.services.catalog import PROGRAM_ENVIRONMENT
from keymem.services.lexicon import cache
from keymem.services.lexicon.index import (
    DIGEST_DTYPE,
    DocTable,
    LexiconIndex,
    NamespaceCsr,
    NamespaceIndex,
    TermColumns,
)
from keymem.services.lexicon.sync import text_digest
from keymem.services.lexicon.tokenizer import TOKENIZER_VERSION, Tokenizer

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SENTENCE_SOURCES = ("hotpot_pooled.dev.json", "koblex_ko.dev.json", "locomo_turns.dev.json")
QUERY_SOURCES = ("hotpot_pooled.dev.json", "koblex_ko.dev.json", "locomo.dev.json")
QUERIES_PER_SOURCE = 100
MAX_POOL_SENTENCES = 30_000
NAMESPACE = "bench"
EPOCH = "bench-epoch"
SEED = 20261129
TOP_N = 10
INDEX_QUERY_ROUNDS = 3  # in-process passes over the query list
REFERENCE_QUERIES = 30  # rank-bm25 is slow: this many queries
UPDATE_EVENTS = 5_000
# Released just before a kill -9, so the next worker applies them after its cache (with Kiwi).
CATCH_UP_EVENTS = 500
CLIENT_COUNTS = (1, 8)
READY_TIMEOUT_S = 300.0
POLL_S = 0.02
START_DELAY_S = 1.5
CALL_TIMEOUT_MS = 10_000
_SENTENCE_END = re.compile(r"(?<=[.!?。])\s+|\n+")


@dataclass
class Corpus:
    texts: list[str]
    tokens: list[list[str]]
    queries: list[str]
    query_tokens: list[list[str]]


def _sentence_pool() -> list[str]:
    sentences: list[str] = []
    for name in SENTENCE_SOURCES:
        path = SHARED_DATA / name
        if not path.exists():
            continue
        for memory in json.loads(path.read_text(encoding="utf-8"))["memories"]:
            sentences.extend(s.strip() for s in _SENTENCE_END.split(memory["content"]) if s.strip())
    if not sentences:  # no shared data: synthetic Zipf-ish text
        rng = random.Random(SEED)
        words = [f"word{i}" for i in range(20_000)] + ["부산", "회의", "서울", "keymem"]
        weights = [1 / (i + 1) for i in range(len(words))]
        sentences = [
            " ".join(rng.choices(words, weights, k=rng.randint(6, 20))) for _ in range(5000)
        ]
    random.Random(SEED).shuffle(sentences)
    return sentences[:MAX_POOL_SENTENCES]


def _queries() -> list[str]:
    queries: list[str] = []
    for name in QUERY_SOURCES:
        path = SHARED_DATA / name
        if path.exists():
            data = json.loads(path.read_text(encoding="utf-8"))
            queries.extend(q["query"] for q in data["queries"][:QUERIES_PER_SOURCE])
    return queries or ["부산 회의", "keymem word3 word17", "서울 word100"]


class CorpusMaker:
    """Short memories of 1-3 pool sentences; each pool sentence is tokenized once.

    Without a tokenizer (the feed stand-in only needs text) the token lists stay empty.
    """

    def __init__(self, tokenizer: Tokenizer | None) -> None:
        self.pool = _sentence_pool()
        self.queries = _queries()

        def tokenize(text: str) -> list[str]:
            return tokenizer.tokenize(text) if tokenizer is not None else []

        self.pool_tokens = [tokenize(s) for s in self.pool]
        self.query_tokens = [tokenize(q) for q in self.queries]

    def document(self, rng: random.Random) -> tuple[str, list[str]]:
        picks = [rng.randrange(len(self.pool)) for _ in range(rng.randint(1, 3))]
        text = " ".join(self.pool[i] for i in picks)
        tokens = [t for i in picks for t in self.pool_tokens[i]]
        return text, tokens

    def bulk_index(self, n: int) -> LexiconIndex:
        """An index of ``n`` documents built in vectorised passes: each
        document is 1-3 pool sentences, its term counts the sum of theirs."""
        vocab = sorted({t for tokens in self.pool_tokens for t in tokens})
        tid = {term: i for i, term in enumerate(vocab)}
        sentences = [Counter(tid[t] for t in tokens) for tokens in self.pool_tokens]
        s_ptr = np.cumsum([0, *map(len, sentences)])
        s_tids = np.fromiter((t for c in sentences for t in c), np.int64, s_ptr[-1])
        s_tfs = np.fromiter((f for c in sentences for f in c.values()), np.int64, s_ptr[-1])
        rng = np.random.default_rng(SEED + n)
        per_doc = rng.integers(1, 4, size=n)
        picks = rng.integers(0, len(sentences), size=int(per_doc.sum()))
        sizes = s_ptr[picks + 1] - s_ptr[picks]
        starts = np.cumsum(sizes) - sizes
        entries = np.repeat(s_ptr[picks] - starts, sizes) + np.arange(int(sizes.sum()))
        docs = np.repeat(np.repeat(np.arange(n), per_doc), sizes)
        keys, where = np.unique(docs * len(vocab) + s_tids[entries], return_inverse=True)
        tfs = np.bincount(where, weights=s_tfs[entries]).astype(np.int32)
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(keys // len(vocab), minlength=n), out=ptr[1:])
        bounds = np.cumsum(per_doc)
        texts = [
            " ".join(self.pool[i] for i in picks[end - k : end].tolist())
            for k, end in zip(per_doc.tolist(), bounds.tolist(), strict=True)
        ]
        ids = np.array([doc_id(i).encode() for i in range(n)])
        csr = NamespaceCsr(ids, vocab, ptr, (keys % len(vocab)).astype(np.int32), tfs)
        digests = np.frombuffer(b"".join(map(text_digest, texts)), DIGEST_DTYPE)
        table = DocTable(ids, np.zeros(n, np.uint8), digests, [NAMESPACE])
        index = LexiconIndex()
        index.load(table, {NAMESPACE: (csr, TermColumns.of(csr))})
        return index

    def corpus(self, n: int) -> Corpus:
        rng = random.Random(SEED + n)
        texts, tokens = [], []
        for _ in range(n):
            text, terms = self.document(rng)
            texts.append(text)
            tokens.append(terms)
        return Corpus(texts, tokens, self.queries, self.query_tokens)


def doc_id(i: int) -> str:
    return f"m{i:08d}"


def _ms_summary(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples_s)
    return {
        "p50_ms": round(percentile(ms, 0.50), 3),
        "p99_ms": round(percentile(ms, 0.99), 3),
        "mean_ms": round(sum(ms) / len(ms), 3),
    }


# -- in process --------------------------------------------------------------------------------
def measure_in_process(corpus: Corpus, reference_max: int) -> tuple[LexiconIndex, dict[str, Any]]:
    n = len(corpus.texts)
    lexicon = LexiconIndex()
    started = time.perf_counter()
    for i, (text, tokens) in enumerate(zip(corpus.texts, corpus.tokens, strict=True)):
        lexicon.upsert(doc_id(i), NAMESPACE, text_digest(text), Counter(tokens))
    build_s = time.perf_counter() - started
    space = lexicon.namespaces[NAMESPACE]
    report = {
        "index_build_docs_per_s": round(n / build_s),
        **_index_figures(lexicon, corpus.query_tokens),
    }
    if n <= reference_max:
        report["rank_bm25"] = _reference(corpus, space)
        report["speedup_p50"] = round(
            report["rank_bm25"]["query"]["p50_ms"] / report["index_query"]["p50_ms"], 1
        )
    return lexicon, report


def _index_figures(lexicon: LexiconIndex, query_tokens: list[list[str]]) -> dict[str, Any]:
    space = lexicon.namespaces[NAMESPACE]
    queries = [Counter(q) for q in query_tokens]
    samples: list[float] = []
    for _ in range(INDEX_QUERY_ROUNDS):
        for query in queries:
            t0 = time.perf_counter()
            space.top(query, TOP_N)
            samples.append(time.perf_counter() - t0)
    return {
        "documents": len(lexicon),
        "terms": space.vocabulary_size(),
        "avg_doc_len": round(space.total_len / len(lexicon), 1),
        "index_query": _ms_summary(samples),
    }


def measure_cache_load(path: Path) -> dict[str, float]:
    """``cache.load`` of the saved file into an empty index (wall and CPU), and the
    checksum over the file alone (a part of it)."""
    started, cpu = time.perf_counter(), time.process_time()
    cache.load(path, LexiconIndex(), tokenizer=TOKENIZER_VERSION)
    report = {
        "wall_s": round(time.perf_counter() - started, 3),
        "cpu_s": round(time.process_time() - cpu, 3),
    }
    started = time.perf_counter()
    hashlib.sha256(path.read_bytes()).digest()
    report["read_and_checksum_s"] = round(time.perf_counter() - started, 3)
    return report


def _reference(corpus: Corpus, space: NamespaceIndex) -> dict[str, Any]:
    from rank_bm25 import BM25Okapi

    started = time.perf_counter()
    reference = BM25Okapi(corpus.tokens)
    build_s = time.perf_counter() - started
    samples: list[float] = []
    worst = 0.0
    ids = {doc_id(i): i for i in range(len(corpus.tokens))}
    for tokens in corpus.query_tokens[:: max(1, len(corpus.query_tokens) // REFERENCE_QUERIES)]:
        t0 = time.perf_counter()
        scores = reference.get_scores(tokens)
        samples.append(time.perf_counter() - t0)
        for hit_id, score in space.top(Counter(tokens), TOP_N):
            worst = max(worst, abs(score - float(scores[ids[hit_id]])))
    return {
        "build_s": round(build_s, 2),
        "queries": len(samples),
        "query": _ms_summary(samples),
        "max_abs_score_diff_top10": worst,
    }


# -- processes ---------------------------------------------------------------------------------
class FeedStandIn:
    """The graph's feed at a fixed epoch/seq over an existing corpus; releases events on demand."""

    def __init__(self, seq: int, documents: int) -> None:
        self.seq = seq
        self.documents = documents
        self.added = 0  # new documents released so far
        self.events: list[dict[str, Any]] = []
        self.maker = CorpusMaker(None)

    def feed_head(self, body: Any) -> dict[str, Any]:
        return {"seq": self.seq, "epoch": EPOCH}

    def feed_snapshot(self, body: Any) -> dict[str, Any]:
        raise KeymemError("the stand-in serves no snapshot: the lexicon must resume from cache")

    def feed_since(self, body: Any) -> dict[str, Any]:
        seq, limit = int(body["seq"]), int(body.get("limit", 1000))
        first = seq - (self.seq - len(self.events))
        events = self.events[max(0, first) : max(0, first) + limit]
        return {"events": events, "head": self.seq, "epoch": EPOCH}

    def release(self, body: Any) -> dict[str, Any]:
        """Append ``count`` events: new memories and corrections of existing ones."""
        count = int(body["count"])
        rng = random.Random(SEED - count)
        for k in range(count):
            if k % 2 == 0:
                target, self.added = self.documents + self.added, self.added + 1
            else:
                target = rng.randrange(self.documents)
            text, _ = self.maker.document(rng)
            self.seq += 1
            doc = {"id": doc_id(target), "namespace": NAMESPACE, "content": text, "keys": []}
            self.events.append({"seq": self.seq, "op": "upsert", "id": doc["id"], "doc": doc})
        return {"head": self.seq}

    def service(self) -> Service:
        service = Service("graph")
        for name in ("feed_head", "feed_snapshot", "feed_since", "release"):
            service.add(name, getattr(self, name))
        return service


def serve_feed(seq: int, documents: int) -> int:
    home = Path(os.environ["KEYMEM_HOME"])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    endpoints = ipc_endpoints(home)
    Worker(FeedStandIn(seq, documents).service(), endpoints.backend, stop=stop).run()
    return 0


def _spawn(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def _wait_ready(client: Client, documents: int, head: int) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < READY_TIMEOUT_S:
        try:
            stats = client.call("lexicon", "index_stats", timeout_ms=2_000)
        except KeymemError:
            time.sleep(POLL_S)
            continue
        sync = stats["sync"]
        if stats["documents"] == documents and sync["phase"] == "live" and sync["seq"] >= head:
            return time.perf_counter() - started
        time.sleep(POLL_S)
    raise TimeoutError("the lexicon did not become ready")


def _query_loop(
    endpoint: str, bodies: list[dict[str, Any]], offset: int, start_at: float, seconds: float
) -> tuple[list[float], int]:
    latencies: list[float] = []
    errors = 0
    with Client(endpoint, timeout_ms=CALL_TIMEOUT_MS) as client:
        try:
            client.call("lexicon", "ping")
        except KeymemError:
            pass
        time.sleep(max(0.0, start_at - time.time()))
        stop_at = time.perf_counter() + seconds
        i = offset
        while (t0 := time.perf_counter()) < stop_at:
            try:
                client.call("lexicon", "search", bodies[i % len(bodies)])
                latencies.append(time.perf_counter() - t0)
            except KeymemError:
                errors += 1
            i += 1
    return latencies, errors


def _load(endpoint: str, queries: list[str], clients: int, seconds: float) -> dict[str, Any]:
    bodies = [{"query": q, "namespace": NAMESPACE, "top_n": TOP_N} for q in queries]
    start_at = time.time() + START_DELAY_S + 0.05 * clients
    args = [(endpoint, bodies, k * 37, start_at, seconds) for k in range(clients)]
    with multiprocessing.get_context("spawn").Pool(clients) as pool:
        outcomes = pool.starmap(_query_loop, args)
    samples = [s for lat, _ in outcomes for s in lat]
    return {
        "clients": clients,
        "requests": len(samples),
        "errors": sum(e for _, e in outcomes),
        "throughput_per_s": round(len(samples) / seconds, 1),
        **_ms_summary(samples),
    }


def measure_service(
    lexicon: LexiconIndex, queries: list[str], seconds: float, home: Path
) -> dict[str, Any]:
    n = len(lexicon)
    started = time.perf_counter()
    path = cache.cache_path(home)
    info = cache.save(path, lexicon, tokenizer=TOKENIZER_VERSION, epoch=EPOCH, seq=n)
    save_s = time.perf_counter() - started
    # the environment a deployment gives its programs, where this process sets no other
    env = {**PROGRAM_ENVIRONMENT, **os.environ}
    env = {k: v for k, v in env.items() if not k.startswith("KEYMEM_")}
    env["KEYMEM_HOME"] = str(home)
    endpoints = ipc_endpoints(home)
    prepare_run_dir(endpoints)
    procs = [
        _spawn(env, "keymem.services", "router"),
        _spawn(env, "benchmarks.lexicon_scale", "serve-feed", str(n), str(n)),
    ]
    report: dict[str, Any] = {
        "cache_bytes": info.bytes,
        "cache_save_s": round(save_s, 2),
        "cache_load_in_process": measure_cache_load(path),
    }
    try:
        with Client(endpoints.frontend) as client:
            spawned = time.perf_counter()
            lexicon_proc = _spawn(env, "keymem.services", "lexicon")
            procs.append(lexicon_proc)
            _wait_ready(client, n, n)
            report["restart_to_ready_s"] = round(time.perf_counter() - spawned, 2)
            stats = client.call("lexicon", "index_stats")
            report["cache_load_s"] = stats["cache"].get("load_s")
            report["kiwi_load_s"] = stats["kiwi"]["load_s"]
            report["kiwi_warm_s"] = stats["kiwi"]["warm_s"]
            report["rss_mb"] = round(client.call("lexicon", "stats")["rss_bytes"] / 2**20, 1)
            report["router"] = [
                _load(endpoints.frontend, queries, c, seconds) for c in CLIENT_COUNTS
            ]
            router_stats = client.call("router", "stats")
            direct = router_stats["services"]["lexicon"]["workers"][0]["direct"]
            report["direct"] = [_load(direct, queries, 1, seconds)]
            head = client.call("graph", "release", {"count": UPDATE_EVENTS})["head"]
            t0 = time.perf_counter()
            _wait_ready(client, n + UPDATE_EVENTS // 2, head)
            report["feed_updates_per_s"] = round(UPDATE_EVENTS / (time.perf_counter() - t0))
            report["rss_mb_after_updates"] = round(
                client.call("lexicon", "stats")["rss_bytes"] / 2**20, 1
            )
            documents = n + UPDATE_EVENTS // 2
            _wait_saved(client, head)
            # the running service's own save: its mapped base and the updates since
            report["service_save_s"] = client.call("lexicon", "index_stats")["cache"]["save_s"]
            report["worker_restart"] = _restart_worker(client, documents, head, queries[0])
            head = client.call("graph", "release", {"count": CATCH_UP_EVENTS})["head"]
            documents += CATCH_UP_EVENTS // 2
            _wait_ready(client, documents, head)
            report["worker_restart_catching_up"] = _restart_worker(
                client, documents, head, queries[0]
            )
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    return report


def _wait_saved(client: Client, seq: int) -> None:
    """Until the worker's periodic cache save has reached ``seq`` (a worker that missed
    heartbeats meanwhile, as format 2's save on the serving thread did at 1M, is asked again)."""
    give_up = time.perf_counter() + READY_TIMEOUT_S
    while time.perf_counter() < give_up:
        try:
            if client.call("lexicon", "index_stats")["cache"].get("saved_seq", -1) >= seq:
                return
        except KeymemError:
            pass
        time.sleep(POLL_S)
    raise TimeoutError("the lexicon did not save its cache")


def _restart_worker(client: Client, documents: int, head: int, query: str) -> dict[str, Any]:
    """kill -9 the serving worker; seconds until its successor (forked from the parent that
    keeps Kiwi) holds every document caught up to ``head``, the first query after that, and
    the successor's memory."""
    old = client.call("lexicon", "ping")["pid"]
    killed = time.perf_counter()
    os.kill(old, signal.SIGKILL)
    ready_s = _wait_ready(client, documents, head)
    t0 = time.perf_counter()
    client.call("lexicon", "search", {"query": query, "namespace": NAMESPACE, "top_n": TOP_N})
    first_query_ms = (time.perf_counter() - t0) * 1000
    stats = client.call("lexicon", "index_stats")
    worker = psutil.Process(client.call("lexicon", "ping")["pid"])
    memory = worker.memory_full_info()
    parent = worker.parent()
    return {
        "ready_s": round(ready_s, 2),
        "ready_since_kill_s": round(time.perf_counter() - killed - first_query_ms / 1000, 2),
        "cache_load_s": stats["cache"].get("load_s"),
        "journal_records": stats["cache"].get("journal_records"),
        "feed_events": stats["sync"]["events"],
        "tokenized": stats["sync"]["tokenized"],
        "first_query_ms": round(first_query_ms, 1),
        "rss_mb": round(memory.rss / 2**20, 1),
        "uss_mb": round(memory.uss / 2**20, 1),
        "pss_mb": round(memory.pss / 2**20, 1),
        "parent_pss_mb": None if parent is None else round(parent.memory_full_info().pss / 2**20),
    }


def measure(sizes: list[int], seconds: float, reference_max: int, bulk: bool) -> dict[str, Any]:
    from keymem.services.lexicon.tokenizer import shared_tokenizer

    t0 = time.perf_counter()
    maker = CorpusMaker(shared_tokenizer())
    report: dict[str, Any] = {
        "pool_sentences": len(maker.pool),
        "queries": len(maker.queries),
        "pool_tokenize_s": round(time.perf_counter() - t0, 1),
        "cpus": os.cpu_count(),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "sizes": [],
    }
    for n in sizes:
        if bulk:
            started = time.perf_counter()
            lexicon = maker.bulk_index(n)
            row = {
                "bulk_build_s": round(time.perf_counter() - started, 1),
                **_index_figures(lexicon, maker.query_tokens),
            }
        else:
            lexicon, row = measure_in_process(maker.corpus(n), reference_max)
        home = Path(tempfile.mkdtemp(prefix="km-lex-", dir="/tmp"))
        try:
            row["service"] = measure_service(lexicon, maker.queries, seconds, home)
        finally:
            shutil.rmtree(home, ignore_errors=True)
        del lexicon
        row["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
        report["sizes"].append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return report


def render(report: dict[str, Any]) -> str:
    lines = [
        f"pool: {report['pool_sentences']} sentences, {report['queries']} queries; "
        f"{report['cpus']} CPUs, load average at start {report['load_avg_at_start']}",
        "",
        "| docs | index query p50 / p99 ms | rank-bm25 p50 ms | speed-up | "
        "router 1 client p50 / p99 ms | router 8 clients p50 / p99 ms (req/s) | "
        "direct p50 ms | cold start s | worker kill -9 to ready s (cache load s; with "
        f"{CATCH_UP_EVENTS} events to catch up) | "
        "first query ms | feed updates/s | index adds/s | RSS MB | worker RSS / USS MB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["sizes"]:
        svc = row["service"]
        one, eight = svc["router"]
        ref = row.get("rank_bm25")
        again = svc["worker_restart"]
        cells = [
            f"{row['documents']:,}",
            f"{row['index_query']['p50_ms']:.3f} / {row['index_query']['p99_ms']:.3f}",
            f"{ref['query']['p50_ms']:.1f}" if ref else "-",
            f"{row['speedup_p50']:.0f}x" if ref else "-",
            f"{one['p50_ms']:.2f} / {one['p99_ms']:.2f}",
            f"{eight['p50_ms']:.2f} / {eight['p99_ms']:.2f} ({eight['throughput_per_s']:.0f})",
            f"{svc['direct'][0]['p50_ms']:.2f}",
            f"{svc['restart_to_ready_s']:.2f}",
            f"{again['ready_s']:.2f} ({again['cache_load_s']}; "
            f"{svc['worker_restart_catching_up']['ready_s']:.2f})",
            f"{again['first_query_ms']:.1f}",
            f"{svc['feed_updates_per_s']:,}",
            f"{row['index_build_docs_per_s']:,}" if "index_build_docs_per_s" in row else "-",
            f"{svc['rss_mb']}",
            f"{again['rss_mb']} / {again['uss_mb']}",
        ]
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "serve-feed":
        return serve_feed(int(sys.argv[2]), int(sys.argv[3]))
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--docs", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--reference-max", type=int, default=100_000)
    parser.add_argument(
        "--bulk", action="store_true", help="build each index in vectorised passes (1M: seconds)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = measure(args.docs, args.seconds, args.reference_max, args.bulk)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
