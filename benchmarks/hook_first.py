"""The hook's first run after a write: what the scale run's slow first hook run of ten pays.

    python -m benchmarks.hook_first [--store PATH] [--runs 5] [--seconds 8] [--repeat 2]

``benchmarks.scale_1m`` runs the hook ten times right after a search loop, 300 lexicon
queries, one ``memory.remember`` and an RSS reading; its first run was 3-4x the others at 1M.
This replays that sequence on one deployment of ``--store`` (a ``graph.duckdb`` copied into a
fresh home, as scale_1m does, or a home template directory copied whole with its store's
``build.json``: its lexicon cache and key indexes spare the first index), then each case
alone, every case on its own prompt (one the warm-up searched, as scale_1m's prompt was),
``--runs`` hook runs after each:

- ``sequence``: scale_1m's steps (search loop, lexicon queries, a remember, the RSS reading);
- ``remember``: a remember, then the hook at once;
- ``remember_settled``: a remember, then the hook once the lexicon's cache save it caused and
  the graph's idle checkpoint are done;
- ``rss``: the RSS reading alone;
- ``idle``: nothing before the hook.

Before each case it waits until no lexicon save is due (``CACHE_SAVE_INTERVAL_S`` since the last
one) and the graph has checkpointed. Each hook run is the probe of ``benchmarks.hook_overhead``
(the hook's own ``respond`` with its phases timed). A thread samples, every few ms, the
lexicon's cache file (a save's partial file, the saved file's mtime) and the graph's
write-ahead log (its size: a checkpoint empties it), so the report puts each hook run next to
what ran in the deployment meanwhile.

``--save-stall CACHE`` instead measures, in process, what a lexicon cache save costs the
serving thread (the cause the deployment cases point to): it loads a saved lexicon cache
(``KEYMEM_HOME/lexicon/terms.cache``), changes one document, and runs BM25 queries on this
thread before and while the save (the snapshot here, the write on a thread, as the service
does) runs: each query's wall time, and the longest, show how long the save held the GIL.

    python -m benchmarks.hook_first --save-stall /tmp/km-home/lexicon/terms.cache
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.deployment import BenchHome, bench_home
from benchmarks.footprint import memory_mb
from benchmarks.graph_bench import Synthetic
from benchmarks.hook_overhead import probe_run
from benchmarks.recall_bench import LIVENESS, PROJECT_DIR, _queries, _search_loop
from benchmarks.scale_1m import _first_remember, _lexicon_queries, lexicon_serving
from benchmarks.scale_store import BUILD_REPORT
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.services.lexicon import cache
from keymem.services.lexicon.cache import PARTIAL_SUFFIX, cache_path
from keymem.services.lexicon.index import LexiconIndex
from keymem.services.lexicon.journal import JOURNAL_FILE
from keymem.services.lexicon.service import CACHE_SAVE_INTERVAL_S
from keymem.services.lexicon.tokenizer import TOKENIZER_VERSION
from keymem.store.database import graph_path

UP_TIMEOUT_S = "1800"
WARM_TIMEOUT_MS = 60_000
SAMPLE_S = 0.005
SETTLE_MARGIN_S = 2.0  # past the save interval, so a case's remember starts a save at once
CHECKPOINT_WAIT_S = 60.0
EVENTS_BEFORE_S = 5.0  # what the deployment did before a case's first hook run, too
BASELINE_QUERY_S = 2.0
QUERY_TERMS = 4  # a query: this many of one document's terms
STALL_TOP_N = 10
CASES = ("sequence", "remember", "remember_settled", "rss", "idle")


class Timeline:
    """Samples the lexicon's cache file and the graph's write-ahead log on a thread; each
    change is an event with its wall time."""

    def __init__(self, home: Path) -> None:
        self.cache = cache_path(home)
        # a save's snapshot rotates the journal: the older file lives until the save is done
        self.rotated = self.cache.with_name(JOURNAL_FILE + ".old")
        self.wal = graph_path(home).with_name(graph_path(home).name + ".wal")
        self.events: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _state(self) -> tuple[bool, bool, int, int]:
        partial = any(self.cache.parent.glob(f"{self.cache.name}.*{PARTIAL_SUFFIX}"))
        rotated = self.rotated.exists()
        try:
            mtime = self.cache.stat().st_mtime_ns
        except FileNotFoundError:
            mtime = 0
        try:
            wal = self.wal.stat().st_size
        except FileNotFoundError:
            wal = 0
        return partial, rotated, mtime, wal

    def _run(self) -> None:
        partial, rotated, mtime, wal = self._state()
        while not self._stop.wait(SAMPLE_S):
            now = time.time()
            new_partial, new_rotated, new_mtime, new_wal = self._state()
            if new_rotated and not rotated:
                self.events.append((now, "lexicon save: snapshot taken (journal rotated)"))
            if new_partial != partial:
                self.events.append((now, "lexicon save writing" if new_partial else "written"))
            if new_mtime != mtime:
                self.events.append((now, "lexicon cache saved"))
            if new_wal < wal:
                self.events.append((now, f"graph checkpoint (wal {wal} -> {new_wal} B)"))
            partial, rotated, mtime, wal = new_partial, new_rotated, new_mtime, new_wal

    def __enter__(self) -> Timeline:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def around(self, moment: float, before_s: float, end: float) -> list[str]:
        """The events from ``before_s`` before ``moment`` to ``end``, in seconds from it."""
        return [
            f"{t - moment:+.3f} {what}" for t, what in self.events if moment - before_s <= t <= end
        ]


def hook_runs(env: dict[str, str], prompt: str, runs: int) -> list[dict[str, Any]]:
    """``runs`` probe runs of the hook for ``prompt``: wall ms, phases, start and end."""
    payload = json.dumps(
        {
            "session_id": "bench-first",
            "cwd": PROJECT_DIR,
            "hook_event_name": "UserPromptSubmit",
            "prompt": prompt,
        }
    ).encode()
    out = []
    for _ in range(runs):
        started, ended, marks, printed = probe_run(env, payload)
        p0 = marks["p0"]
        out.append(
            {
                "wall_ms": round((ended - started) * 1000, 1),
                "interpreter_ms": round((marks["started_at"] - started) * 1000, 1),
                "imports_ms": round((marks["imports"] - p0) * 1000, 1),
                "inject_ms": round((marks["inject_end"] - marks["inject_start"]) * 1000, 1),
                "answered": bool(printed),
                "start": started,
                "end": ended,
            }
        )
    return out


def settle(client: Client, timeline: Timeline) -> None:
    """Until a remember would start a lexicon save at once and the graph has checkpointed."""
    give_up = time.time() + CHECKPOINT_WAIT_S
    while time.time() < give_up:
        saved = [t for t, what in timeline.events if what == "lexicon cache saved"]
        last_write = max((t for t, what in timeline.events if "checkpoint" in what), default=0)
        stats = client.call("lexicon", "index_stats", timeout_ms=10_000)
        quiet = not saved or time.time() - saved[-1] > CACHE_SAVE_INTERVAL_S + SETTLE_MARGIN_S
        if quiet and stats["sync"]["synced"] and time.time() - last_write > 1.0:
            return
        time.sleep(0.5)


def case(
    name: str,
    deployment: BenchHome,
    client: Client,
    data: Synthetic,
    queries: list[dict[str, Any]],
    seconds: float,
) -> None:
    """The steps that precede the hook in case ``name``."""
    if name == "sequence":
        _search_loop(client, queries, seconds, rerank=True)
        _lexicon_queries(client, queries)
    if name in ("sequence", "remember", "remember_settled"):
        _first_remember(client, data)
    if name == "remember_settled":
        seq = client.call("graph", "feed_head", timeout_ms=10_000)["seq"]
        give_up = time.time() + CHECKPOINT_WAIT_S
        while time.time() < give_up:
            cache = client.call("lexicon", "index_stats", timeout_ms=10_000)["cache"]
            wal = graph_path(deployment.home).with_name("graph.duckdb.wal")
            checkpointed = not wal.exists() or wal.stat().st_size == 0
            if cache.get("saved_seq", 0) >= seq and checkpointed:
                break
            time.sleep(0.2)
    if name in ("sequence", "rss"):
        memory_mb(deployment)


def measure(store: Path, runs: int, seconds: float, repeat: int) -> dict[str, Any]:
    built = json.loads(((store if store.is_dir() else store.parent) / BUILD_REPORT).read_text())
    data = Synthetic(built["memories"], seed=built["memories"])  # scale_1m's stream
    with bench_home("km-hf-") as deployment:
        deployment.env["KEYMEM_HEARTBEAT_LIVENESS"] = LIVENESS
        if store.is_dir():  # a home template: its lexicon cache and key indexes come along
            shutil.copytree(store, deployment.home, symlinks=True, dirs_exist_ok=True)
            shutil.rmtree(deployment.home / "run", ignore_errors=True)
        else:
            shutil.copy(store, graph_path(deployment.home))
        started = time.perf_counter()
        deployment.keymem("up", "--timeout", UP_TIMEOUT_S)
        up_s = round(time.perf_counter() - started, 1)
        report: dict[str, Any] = {"store": str(store), "up_s": up_s}
        with (
            Client(ipc_endpoints(deployment.home).frontend) as client,
            Timeline(deployment.home) as timeline,
        ):
            report["lexicon_first_index_s"] = round(lexicon_serving(client, built["memories"]), 1)
            queries = _queries(data)
            for query in queries:  # each query's pool once, as scale_1m does
                client.call("memory", "search", query, timeout_ms=WARM_TIMEOUT_MS)
            report["load_average_start"] = [round(x, 1) for x in os.getloadavg()]
            report["cases"] = []
            for round_ in range(repeat):
                for i, name in enumerate(CASES):
                    settle(client, timeline)
                    prompt = queries[round_ * len(CASES) + i]
                    (deployment.home / "namespaces.json").write_text(
                        json.dumps({PROJECT_DIR: prompt["namespace"]})
                    )
                    began = time.time()
                    case(name, deployment, client, data, queries, seconds)
                    ran = hook_runs(deployment.env, prompt["query"], runs)
                    time.sleep(1.0)  # a save still running shows its end
                    report["cases"].append(
                        {
                            "case": name,
                            "wall_ms": [r["wall_ms"] for r in ran],
                            "inject_ms": [r["inject_ms"] for r in ran],
                            "interpreter_ms": [r["interpreter_ms"] for r in ran],
                            "answered": sum(r["answered"] for r in ran),
                            "hooks_from_s": round(ran[0]["start"] - began, 3),
                            "hook_ends_s": [round(r["end"] - ran[0]["start"], 3) for r in ran],
                            "events": timeline.around(
                                ran[0]["start"], EVENTS_BEFORE_S, ran[-1]["end"] + 1
                            ),
                        }
                    )
                    print(json.dumps(report["cases"][-1]), file=sys.stderr, flush=True)
        report["load_average_end"] = [round(x, 1) for x in os.getloadavg()]
        return report


def _latencies(
    index: LexiconIndex, queries: list[tuple[str, dict[str, int]]], until: Any
) -> list[float]:
    """Query wall times (ms), round robin over ``queries``, until ``until()`` says stop."""
    taken = []
    i = 0
    while not until():
        namespace, query = queries[i % len(queries)]
        started = time.perf_counter()
        index.top(namespace, query, STALL_TOP_N)
        taken.append((time.perf_counter() - started) * 1000)
        i += 1
    return taken


def _spread(taken: list[float]) -> dict[str, float]:
    ordered = sorted(taken)
    return {
        "n": len(ordered),
        "p50_ms": round(ordered[len(ordered) // 2], 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2),
        "max_ms": round(ordered[-1], 2),
    }


def save_stall(cache_file: Path) -> dict[str, Any]:
    """What one cache save after a one-document change costs this thread's queries."""
    index = LexiconIndex()
    started = time.perf_counter()
    info = cache.load(cache_file, index, tokenizer=TOKENIZER_VERSION)
    out: dict[str, Any] = {
        "documents": info.documents,
        "load_s": round(time.perf_counter() - started, 2),
    }
    queries = []
    for namespace, space in sorted(index.namespaces.items()):
        for doc_id in list(space.ids())[:: max(1, space.n_docs // 50)][:50]:
            terms = dict(list(space.terms_of(doc_id).items())[:QUERY_TERMS])
            queries.append((namespace, terms))
    end = time.perf_counter() + BASELINE_QUERY_S
    out["queries_idle"] = _spread(_latencies(index, queries, lambda: time.perf_counter() > end))
    namespace, terms = queries[0]
    digest = b"\x01" * 16
    index.upsert("hook-first-changed", namespace, digest, terms)
    with tempfile.TemporaryDirectory(prefix="km-hf-save-", dir="/tmp") as tmp:
        started = time.perf_counter()
        snap = cache.snapshot(
            index, tokenizer=TOKENIZER_VERSION, epoch=info.epoch, seq=info.seq + 1
        )
        out["snapshot_ms"] = round((time.perf_counter() - started) * 1000, 2)
        writer = threading.Thread(target=cache.write, args=(Path(tmp) / "terms.cache", snap))
        started = time.perf_counter()
        writer.start()
        out["queries_saving"] = _spread(_latencies(index, queries, lambda: not writer.is_alive()))
        writer.join()
        out["save_s"] = round(time.perf_counter() - started, 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--store", type=Path, default=Path("/tmp/km-scale5/store-100000/graph.duckdb")
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--save-stall", type=Path, help="a lexicon cache file: the save alone")
    args = parser.parse_args(argv)
    if args.save_stall is not None:
        print(json.dumps(save_stall(args.save_stall), indent=1))
        return 0
    print(json.dumps(measure(args.store, args.runs, args.seconds, args.repeat), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
