"""Batched writes through MCP against the reranker's warm-up of their text, on one deployment.

    python -m benchmarks.batch_warmup --store 10000=/tmp/km-scale5/store-10000/graph.duckdb
        [--home DIR] [--batches 20] [--search-s 8] [--fresh 20] [--gap-s 0.5]

For each ``SIZE=PATH`` (a graph file; ``--home DIR`` instead reuses a home left by an earlier
run with ``--keep``, so the lexicon's cache spares the first index of a large store) it starts
the real deployment (`keymem up`), waits for the lexicon to index every memory, spawns
`keymem mcp` over stdio with the SDK's client, and measures, one after another:

- ``load``: ``--batches`` back-to-back ``remember_batch`` of 100 (items of
  ``benchmarks.graph_bench.Synthetic``): memories/s, p50 per batch, each process's CPU per
  memory during the load, then again once the reranker has gone quiet (the warm-up the load
  left behind included), and the reranker's requests (warm-up calls) during and after it;
- ``search_idle``: ``memory.search`` from a plain router client for ``--search-s`` seconds,
  nothing else running (p50 / p95 round trip);
- ``search_under_load``: the same searches from a thread while the MCP client writes batches
  back to back for as long: both rates;
- ``fresh``: ``--fresh`` times, a search for a memory's text (its pool warmed by the same search
  once before), then the memory written through MCP (`remember`), then after ``--gap-s`` the
  search again: its round trip and rerank stage (the new memory is the one passage that may be
  cold), and whether it came back; as many more times, the memory's warmth at ``--gap-s``
  itself, probed with ``reranker.warm`` (``cached: 0`` means it was warm already);
- ``after_load``: the same probe for the last memory of a load of 5 batches, ``--gap-s`` after
  its acknowledgement.

``--py-spy DIR`` also samples every process of the deployment (and the MCP server) with
py-spy during the load (``--py-spy-bin``: where py-spy is), writes each one's folded stacks to
``DIR/NAME-PID.txt`` and prints each program's busiest functions (share of its samples with the
function on the stack, and as the innermost Python frame).

To compare two trees, run it once with each tree's ``keymem`` first on ``PYTHONPATH`` (a
``git archive`` of each commit, so the shared tree's edits cannot leak in); the deployment and
the MCP server inherit it. Run it nice'd; a 1M store under ``flock /tmp/km1m.lock``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters, stdio_client

from benchmarks.deployment import BenchHome, bench_home, timed_tool
from benchmarks.graph_bench import Synthetic
from benchmarks.recall_bench import _queries
from benchmarks.scale_1m import lexicon_serving
from benchmarks.write_rate import LIVENESS, UP_TIMEOUT_S, _cpu_s, _name, _programs
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.store.database import graph_path

BATCH = 100
AFTER_LOAD_BATCHES = 5
QUIET_S = 2.0  # the reranker served nothing for this long: the warm-up is done
QUIET_GIVE_UP_S = 60.0
POLL_S = 0.25
SEARCH_TIMEOUT_MS = 20_000
FIRST_WRITE_TIMEOUT_MS = 60_000  # the graph's dedup table is built on the first write
# What a kept home leaves out: the last run's sockets, logs, journals and supervisord config.
HOME_RUNTIME = shutil.ignore_patterns("run", "logs", "journal", "supervisord.conf")
PY_SPY_RATE_HZ = "200"
PY_SPY_STOP_S = 30.0
TOP_FUNCTIONS = 12


def _item(data: Synthetic) -> dict[str, Any]:
    return {k: v for k, v in data.item().items() if k != "key_vectors"}


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 1) if values else 0.0


class RerankerCalls:
    """The reranker's requests (warm-ups, scores) other than this counter's own ``stats``
    polls, which the worker counts too."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.polls = 0

    def count(self) -> int:
        requests = int(self.client.call("reranker", "stats", {})["requests"])
        self.polls += 1
        return requests - self.polls

    def quiet(self) -> tuple[int, float]:
        """Wait until the reranker has served nothing else for ``QUIET_S`` (at most
        ``QUIET_GIVE_UP_S``): its count then, and the seconds it kept serving."""
        started = time.monotonic()
        last, since = self.count(), time.monotonic()
        while time.monotonic() - since < QUIET_S and time.monotonic() - started < QUIET_GIVE_UP_S:
            time.sleep(POLL_S)
            now = self.count()
            if now != last:
                last, since = now, time.monotonic()
        return last, round(since - started, 1)


def _per_memory(before: dict[str, float], after: dict[str, float], memories: int) -> dict[str, Any]:
    per = {n: round((after[n] - before.get(n, 0.0)) / memories * 1000, 3) for n in sorted(after)}
    return {**per, "all": round(sum(per.values()), 3)}


def _search(client: Client, query: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    body = {**query, "timing": True, "top_k": 10}
    started = time.perf_counter()
    reply = client.call("memory", "search", body, timeout_ms=SEARCH_TIMEOUT_MS)
    return (time.perf_counter() - started) * 1000, reply


class SearchLoop(threading.Thread):
    """``memory.search`` round trips (ms) in a loop until stopped, on its own client."""

    def __init__(self, endpoint: str, queries: list[dict[str, Any]]) -> None:
        super().__init__(name="searches", daemon=True)
        self.endpoint, self.queries = endpoint, queries
        self.stop = threading.Event()
        self.samples: list[float] = []

    def run(self) -> None:
        with Client(self.endpoint) as client:
            while not self.stop.is_set():
                ms, _ = _search(client, self.queries[len(self.samples) % len(self.queries)])
                self.samples.append(ms)

    def summary(self) -> dict[str, Any]:
        return {
            "n": len(self.samples),
            "p50_ms": _pct(self.samples, 50),
            "p95_ms": _pct(self.samples, 95),
        }


async def _batches(
    mcp: McpClient, data: Synthetic, count: int
) -> tuple[list[float], list[dict[str, Any]]]:
    seconds, items = [], []
    for _ in range(count):
        batch = [_item(data) for _ in range(BATCH)]
        seconds.append(await timed_tool(mcp, "remember_batch", {"items": batch}))
        items.extend(batch)
    return seconds, items


class Profiles:
    """py-spy recording every process in ``processes`` until ``stop``; each one's folded
    stacks in ``folder``."""

    def __init__(self, py_spy: str, folder: Path, processes: list[psutil.Process]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.outputs: list[tuple[str, Path]] = []
        self.recorders: list[subprocess.Popen[bytes]] = []
        for process in processes:
            output = folder / f"{_name(process)}-{process.pid}.txt"
            self.outputs.append((_name(process), output))
            command = [py_spy, "record", "--nonblocking", "--nolineno", "-f", "raw"]
            command += ["-r", PY_SPY_RATE_HZ, "-p", str(process.pid), "-o", str(output)]
            self.recorders.append(
                subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )

    def stop(self) -> dict[str, Any]:
        for recorder in self.recorders:
            recorder.send_signal(signal.SIGINT)
        for recorder in self.recorders:
            recorder.wait(PY_SPY_STOP_S)
        return {f"{name} {path.name}": top_functions(path) for name, path in self.outputs}


def top_functions(path: Path) -> dict[str, Any]:
    """The functions most on the stack in py-spy's folded ``path`` (idle waits excluded by
    py-spy), as shares of the samples: anywhere on the stack, and innermost."""
    inclusive: Counter[str] = Counter()
    innermost: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines() if path.exists() else []:
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")[1:]  # the first is the thread
        total += int(count)
        for frame in set(frames):
            inclusive[frame] += int(count)
        if frames:
            innermost[frames[-1]] += int(count)

    def shares(counter: Counter[str]) -> dict[str, float]:
        return {f: round(c / total, 3) for f, c in counter.most_common(TOP_FUNCTIONS)}

    return {"samples": total, "on_stack": shares(inclusive), "innermost": shares(innermost)}


def _rate(seconds: list[float]) -> dict[str, Any]:
    return {
        "per_s": round(BATCH * len(seconds) / sum(seconds), 1),
        "batch_p50_ms": _pct([s * 1000 for s in seconds], 50),
    }


async def _load(
    mcp: McpClient,
    reranker: RerankerCalls,
    processes: list[psutil.Process],
    data: Synthetic,
    args: argparse.Namespace,
) -> dict[str, Any]:
    batches = args.batches
    warm_before, _ = reranker.quiet()
    profiles = Profiles(args.py_spy_bin, args.py_spy, processes) if args.py_spy else None
    cpu_before = _cpu_s(processes)
    seconds, _ = await _batches(mcp, data, batches)
    cpu_loaded = _cpu_s(processes)
    profile = profiles.stop() if profiles is not None else None
    warm_loaded = reranker.count()
    warm_after, waited = reranker.quiet()
    cpu_after = _cpu_s(processes)
    memories = BATCH * batches
    return {
        **_rate(seconds),
        "cpu_ms_per_memory_during": _per_memory(cpu_before, cpu_loaded, memories),
        "cpu_ms_per_memory_with_warm_up": _per_memory(cpu_before, cpu_after, memories),
        "warm_calls_during": warm_loaded - warm_before,
        "warm_calls_after": warm_after - warm_loaded,
        "warm_up_after_s": waited,
        **({"profile": profile} if profile is not None else {}),
    }


async def _search_under_load(
    mcp: McpClient, endpoint: str, data: Synthetic, queries: list[dict[str, Any]], seconds: float
) -> dict[str, Any]:
    loop = SearchLoop(endpoint, queries)
    loop.start()
    spent: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        spent.extend((await _batches(mcp, data, 1))[0])
    loop.stop.set()
    await asyncio.to_thread(loop.join)
    return {"search": loop.summary(), "batches": _rate(spent)}


async def _fresh(
    mcp: McpClient, client: Client, data: Synthetic, trials: int, gap_s: float
) -> dict[str, Any]:
    """The first search of a just-written memory, and its warmth ``gap_s`` after the write."""
    searches, reranks, found, warm = [], [], 0, 0
    for _ in range(trials):
        item = _item(data)
        query = {"query": item["content"], "namespace": item["namespace"]}
        _search(client, query)  # the pool as it was, warm
        await timed_tool(mcp, "remember", item)
        await asyncio.sleep(gap_s)
        ms, reply = _search(client, query)
        searches.append(ms)
        reranks.append(reply["timing_ms"].get("rerank", 0.0))
        found += any(r.get("content") == item["content"] for r in reply["memories"])
        probe = _item(data)
        await timed_tool(mcp, "remember", probe)
        await asyncio.sleep(gap_s)
        warm += client.call("reranker", "warm", {"passages": [probe["content"]]})["cached"] == 0
    return {
        "search_p50_ms": _pct(searches, 50),
        "search_p95_ms": _pct(searches, 95),
        "rerank_p50_ms": _pct(reranks, 50),
        "found": f"{found}/{trials}",
        "warm_at_gap": f"{warm}/{trials}",
    }


async def _after_load(
    mcp: McpClient, reranker: RerankerCalls, data: Synthetic, trials: int, gap_s: float
) -> dict[str, Any]:
    warm = 0
    for _ in range(trials):
        _, items = await _batches(mcp, data, AFTER_LOAD_BATCHES)
        await asyncio.sleep(gap_s)
        probe = {"passages": [items[-1]["content"]]}
        warm += reranker.client.call("reranker", "warm", probe)["cached"] == 0
        reranker.quiet()
    return {"last_memory_warm_at_gap": f"{warm}/{trials}"}


async def _session(deployment: BenchHome, size: int, args: argparse.Namespace) -> dict[str, Any]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "keymem.services.cli", "mcp"], env=deployment.env
    )
    data = Synthetic(size, seed=size + 29)  # another stream than the build's and write_rate's
    queries = _queries(data)
    endpoint = ipc_endpoints(deployment.home).frontend
    report: dict[str, Any] = {}
    with (
        tempfile.TemporaryFile("w+") as errlog,
        Client(endpoint, timeout_ms=SEARCH_TIMEOUT_MS) as client,
    ):
        client.call("memory", "remember", _item(data), timeout_ms=FIRST_WRITE_TIMEOUT_MS)
        for query in queries:  # each pool once, as recall_bench does: searches compare warm
            _search(client, query)
        async with McpClient(stdio_client(params, errlog=errlog)) as mcp:
            await timed_tool(mcp, "remember", _item(data))  # the session's first call
            server = next(
                p for p in psutil.Process().children(recursive=True) if "mcp" in p.cmdline()
            )
            processes = _programs(deployment, server)
            reranker = RerankerCalls(client)
            report["load"] = await _load(mcp, reranker, processes, data, args)
            idle = SearchLoop(endpoint, queries)
            idle.start()
            await asyncio.sleep(args.search_s)
            idle.stop.set()
            await asyncio.to_thread(idle.join)
            report["search_idle"] = idle.summary()
            reranker.quiet()
            report["search_under_load"] = await _search_under_load(
                mcp, endpoint, data, queries, args.search_s
            )
            reranker.quiet()
            report["fresh"] = await _fresh(mcp, client, data, args.fresh, args.gap_s)
            report["after_load"] = await _after_load(
                mcp, reranker, data, args.after_load, args.gap_s
            )
    return report


def measure(
    size: int, store: Path | None, home: Path | None, keep: Path | None, args: argparse.Namespace
) -> dict[str, Any]:
    with bench_home("km-bw-") as deployment:
        deployment.env["KEYMEM_HEARTBEAT_LIVENESS"] = LIVENESS
        if home is not None:
            shutil.rmtree(deployment.home)
            shutil.copytree(home, deployment.home, symlinks=True, ignore=HOME_RUNTIME)
        elif store is not None:
            shutil.copy(store, graph_path(deployment.home))
        started = time.perf_counter()
        deployment.keymem("up", "--timeout", UP_TIMEOUT_S)
        report: dict[str, Any] = {"memories": size, "up_s": round(time.perf_counter() - started, 1)}
        with Client(ipc_endpoints(deployment.home).frontend) as client:
            report["lexicon_ready_s"] = round(lexicon_serving(client, size), 1)
        report["load_average_start"] = [round(x, 1) for x in os.getloadavg()]
        report.update(asyncio.run(_session(deployment, size, args)))
        report["load_average_end"] = [round(x, 1) for x in os.getloadavg()]
        if keep is not None:
            deployment.keymem("down")
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(deployment.home, keep, symlinks=True, ignore=HOME_RUNTIME)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", action="append", default=[], metavar="SIZE=PATH")
    parser.add_argument("--home", type=Path, help="a home kept by --keep (instead of --store)")
    parser.add_argument("--memories", type=int, help="with --home: how many memories it holds")
    parser.add_argument("--keep", type=Path, help="copy the home here after the run")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--search-s", type=float, default=8.0)
    parser.add_argument("--fresh", type=int, default=20)
    parser.add_argument("--after-load", type=int, default=5)
    parser.add_argument("--gap-s", type=float, default=0.5)
    parser.add_argument("--py-spy", type=Path, help="profile the load; stacks into this folder")
    parser.add_argument("--py-spy-bin", default="py-spy")
    args = parser.parse_args()
    runs: list[tuple[int, Path | None, Path | None]] = [
        (int(size), Path(path), None) for size, path in (s.split("=", 1) for s in args.store)
    ]
    if args.home is not None:
        runs.append((args.memories, None, args.home))
    for size, store, home in runs:
        print(json.dumps(measure(size, store, home, args.keep, args)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
