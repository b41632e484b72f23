"""How one machine's figures grow with the store: 10k -> 100k -> 1M memories, in one run per size.

    python -m benchmarks.scale_1m --memories 10000 100000 1000000 [--stores /tmp/km-scale5]
        [--seconds 10] [--hook-runs 20] [--mcp-calls 100] [--remember-calls 1000]
        [--out docs/scaling] [--commit SHA]

For each size it builds (once; kept under ``--stores`` and copied for every run, since the
build is the expensive part) the synthetic store of ``benchmarks.scale_store`` (the stream of
``benchmarks.graph_bench`` with the default embedder's key vectors, the rows
``remember_batch`` writes, bulk-loaded), starts the real deployment on a copy (`keymem up`:
the keys are already in the embedder's space, the lexicon indexes every memory from the
change feed), and measures:

- hybrid search (`memory.search`, rerank on) p50/p99 warm, and the lexicon's own query time;
- the hook round trip p50/p95 (spawned as a host does);
- the MCP tools over stdio (`keymem mcp` spawned by the SDK's client): `recall` p50, and
  durable `remember` from one sequential client (memories/s, over ``--remember-calls``: the
  rate is the mean call's, and a run of ~1 s is one fold or one stall away from another
  figure), the same client with 8 calls in flight at once, and ten `remember_batch` of 100
  (and the rate of the first three, the row's measure before 2026-12-03d), with every
  program's CPU a batched memory; then the same client's remembers and ten batches written as
  an agent's are, about one key a memory that the store does not hold (``COINED_PER_MEMORY``);
- memory per process (RSS and PSS), the DuckDB file size;
- a lexicon worker's restart (kill -9 to every document indexed again, from its cache);
- `keymem down` then `keymem up` to ready, and to the lexicon serving every document.

It prints a table and writes ``scale.json`` and ``scale.png`` (one panel per figure against the
store size, log-log) into ``--out``. Run it nice'd: the box is shared.

``--costs`` instead measures, in process and in CPU time, the costs that decide how far the
figures grow (docs/SCALING.md): the graph's start-up by phase, a ``CHECKPOINT`` after 60
single remembers, and the exact key scan over a namespace's keys, float32 and float16.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import psutil
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters, stdio_client
from threadpoolctl import threadpool_limits

from benchmarks.deployment import BenchHome, bench_home, timed_tool
from benchmarks.footprint import memory_mb
from benchmarks.graph_bench import DIM, Synthetic, agent_key_texts, vocabulary_size
from benchmarks.recall_bench import LIVENESS, _hook, _queries, _search_loop
from benchmarks.scale_store import BUILD_REPORT, KeyVectors, bulk_store
from benchmarks.write_rate import _cpu_ms_per, _cpu_s, _programs
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.protocol.errors import KeymemError
from keymem.services.graph import GraphService, rows
from keymem.services.graph.service import BLAS_THREADS
from keymem.services.graph.state import GraphState
from keymem.store.database import GraphStore, graph_path

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after the backend is chosen

UP_TIMEOUT_S = "1800"
MCP_BATCH = 100
# Batches of the batch row: three (0.25-0.4 s of calls) gave 744-1,191 memories/s in eight
# runs of this phase on three 1M deployments of one commit (docs/history/batch-rate-2026-12-03d.md);
# ten read the rate the box sustains. The first three's rate is kept beside it, the row's
# measure before.
MCP_BATCHES = 10
MCP_BATCHES_BEFORE = 3
FIRST_BATCHES = f"remember_batch_100_first_{MCP_BATCHES_BEFORE}_per_s"
# Remember calls one MCP session keeps in flight for the concurrent row: an agent saving a
# turn's facts in parallel tool calls (services/mcp/coalesce.py sends them together).
MCP_IN_FLIGHT = 8
MCP_STDERR_TAIL_CHARS = 2_000
# An agent's writes coin keys (1.6 new ones a memory in the second half of locomo_agentkeys'
# conversations; the Zipf stream 0.002-0.05): the coined rows write one a memory on average
# (docs/history/writes-agent-keys-2026-12-04.md), COINED_CALLS sequential remembers and
# MCP_BATCHES batches of MCP_BATCH.
COINED_PER_MEMORY = 1.0
COINED_CALLS = 300
LEXICON_QUERIES = 300
POLL_S = 0.05
WARM_TIMEOUT_MS = 60_000  # a large store's first search of a query builds its pools
# The graph's first write builds its content-dedup table over every memory (~30 s at 1M).
FIRST_WRITE_TIMEOUT_MS = 300_000
INDEX_GIVE_UP_S = 1_800.0
CHECKPOINT_WRITES = 60
SCAN_ROUNDS = 20
HUB_MIN_LINKS = 50


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 3)


def ensure_store(stores: Path, memories: int) -> tuple[Path, dict[str, Any]]:
    """The built store of this size (built now if missing) and its build report."""
    home = stores / f"store-{memories}"
    report = home / BUILD_REPORT
    if not report.exists():  # none, or a build that did not finish
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        vectors = KeyVectors(stores)
        table = vectors.table(vocabulary_size(memories))
        bulk_store(home, memories, table, vectors.fingerprint())
    return graph_path(home), json.loads(report.read_text())


def _lexicon_queries(client: Client, queries: list[dict[str, Any]]) -> dict[str, float]:
    samples = []
    for i in range(LEXICON_QUERIES):
        body = {**queries[i % len(queries)], "top_n": 10}
        started = time.perf_counter()
        client.call("lexicon", "search", body, timeout_ms=10_000)
        samples.append((time.perf_counter() - started) * 1000)
    return {"p50_ms": _pct(samples, 50), "p99_ms": _pct(samples, 99)}


def lexicon_serving(client: Client, memories: int, old_pid: int | None = None) -> float:
    """Seconds until a lexicon worker (other than ``old_pid``) serves every memory; a worker
    busy indexing may not answer a poll in time, which only means not yet."""
    started = time.monotonic()
    while time.monotonic() - started < INDEX_GIVE_UP_S:
        try:
            if client.call("lexicon", "ping", timeout_ms=1_000)["pid"] != old_pid:
                stats = client.call("lexicon", "index_stats", timeout_ms=2_000)
                if stats["documents"] >= memories and stats["sync"]["phase"] == "live":
                    return time.monotonic() - started
        except KeymemError:
            pass
        time.sleep(POLL_S)
    raise TimeoutError("the lexicon did not serve every memory in time")


def lexicon_restart(client: Client, memories: int) -> float:
    """kill -9 of the lexicon's worker to a new worker serving every memory (its cache)."""
    old_pid = client.call("lexicon", "ping")["pid"]
    os.kill(old_pid, signal.SIGKILL)
    return round(lexicon_serving(client, memories, old_pid), 2)


def _items(data: Synthetic, count: int) -> list[dict[str, Any]]:
    """``count`` remember arguments as an MCP client sends them (keys as texts)."""
    return [{k: v for k, v in data.item().items() if k != "key_vectors"} for _ in range(count)]


async def _mcp(
    deployment: BenchHome,
    data: Synthetic,
    coined: Synthetic,
    calls: tuple[int, int],
    out: dict[str, Any],
) -> None:
    """The MCP figures into ``out``, each as soon as it is measured (a later tool may fail):
    ``calls`` is (recalls and calls in flight, sequential remembers); ``coined`` writes keys
    the store does not hold."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "keymem.services.cli", "mcp"], env=deployment.env
    )
    queries = [data.query() for _ in range(calls[0])]
    items = _items(data, sum(calls) + MCP_BATCH * MCP_BATCHES)
    writes = Writes(items, _items(coined, COINED_CALLS + MCP_BATCH * MCP_BATCHES))
    with tempfile.TemporaryFile("w+") as errlog:
        try:
            await _mcp_session(deployment, params, queries, writes, calls[1], errlog, out)
        except Exception as exc:  # the SDK's task group wraps it; its stderr says why
            errlog.seek(0)
            tail = errlog.read()[-MCP_STDERR_TAIL_CHARS:].strip()
            raise RuntimeError(f"{_cause(exc)}; keymem mcp's stderr: {tail or 'empty'}") from exc


def _cause(exc: BaseException) -> str:
    """The innermost errors of ``exc`` (an ExceptionGroup names only how many it holds)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_cause(inner) for inner in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class Writes:
    """An MCP session's remember arguments: the Zipf stream's, and those coining keys."""

    items: list[dict[str, Any]]
    coined: list[dict[str, Any]]


async def _mcp_session(
    deployment: BenchHome,
    params: StdioServerParameters,
    queries: list[dict[str, Any]],
    writes: Writes,
    calls: int,
    errlog: Any,
    out: dict[str, Any],
) -> None:
    items = writes.items
    async with McpClient(stdio_client(params, errlog=errlog)) as mcp:
        timed = functools.partial(timed_tool, mcp)

        await timed("recall", {"query": queries[0]["text"]})  # the session's first call
        recall = [
            await timed("recall", {"query": q["text"], "namespace": q["namespace"]})
            for q in queries
        ]
        out["recall"] = {"p50_ms": _pct([s * 1000 for s in recall], 50)}
        remember = [await timed("remember", item) for item in items[:calls]]
        out["remember_1_client_per_s"] = round(len(remember) / sum(remember), 1)
        out["remember_p50_ms"] = _pct([s * 1000 for s in remember], 50)
        # the same client with MCP_IN_FLIGHT calls at once (a host's parallel tool calls)
        pending = iter(items[calls + MCP_BATCH * MCP_BATCHES :])
        in_flight: list[float] = []

        async def lane() -> None:
            for item in pending:  # the lanes share one iterator: each item is sent once
                in_flight.append(await timed("remember", item))

        started = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(MCP_IN_FLIGHT)))
        wall = time.perf_counter() - started
        out[f"remember_in_flight_{MCP_IN_FLIGHT}_per_s"] = round(len(in_flight) / wall, 1)
        out[f"remember_in_flight_{MCP_IN_FLIGHT}_p50_ms"] = _pct([s * 1000 for s in in_flight], 50)
        # each program's CPU over the batches (psutil, as benchmarks.write_rate reports it)
        server = next(p for p in psutil.Process().children(recursive=True) if "mcp" in p.cmdline())
        processes = _programs(deployment, server)
        before = _cpu_s(processes)
        batches = [
            await timed("remember_batch", {"items": items[calls + i : calls + i + MCP_BATCH]})
            for i in range(0, MCP_BATCH * MCP_BATCHES, MCP_BATCH)
        ]
        spent = _cpu_ms_per(before, _cpu_s(processes), MCP_BATCH * len(batches))
        out["remember_batch_100_per_s"] = round(MCP_BATCH * len(batches) / sum(batches), 1)
        first = batches[:MCP_BATCHES_BEFORE]
        out[FIRST_BATCHES] = round(MCP_BATCH * len(first) / sum(first), 1)
        out["remember_batch_100_s"] = [round(s, 3) for s in batches]
        out["remember_batch_100_cpu_ms_per_memory"] = spent
        # as an agent writes: about a key a memory the store does not hold
        coined = [await timed("remember", item) for item in writes.coined[:COINED_CALLS]]
        out["remember_coined_1_client_per_s"] = round(len(coined) / sum(coined), 1)
        coined_batches = [
            await timed(
                "remember_batch",
                {"items": writes.coined[COINED_CALLS + i : COINED_CALLS + i + MCP_BATCH]},
            )
            for i in range(0, MCP_BATCH * MCP_BATCHES, MCP_BATCH)
        ]
        out["remember_batch_100_coined_per_s"] = round(
            MCP_BATCH * len(coined_batches) / sum(coined_batches), 1
        )


def _key_index_log(home: Path) -> list[str]:
    """What the graph's log says of its approximate key indexes so far (built, loaded)."""
    log = home / "logs" / "graph.log"
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return [line for line in lines if "key index" in line]


def _first_remember(client: Client, data: Synthetic) -> float:
    """Seconds of the deployment's first durable write, outside the MCP step: it pays for the
    graph's dedup table (built on first use), which a tool's 20 s deadline may not cover."""
    item = {k: v for k, v in data.item().items() if k != "key_vectors"}
    started = time.perf_counter()
    client.call("memory", "remember", item, timeout_ms=FIRST_WRITE_TIMEOUT_MS)
    return round(time.perf_counter() - started, 2)


def _up(deployment: BenchHome) -> float:
    started = time.perf_counter()
    deployment.keymem("up", "--timeout", UP_TIMEOUT_S)
    return round(time.perf_counter() - started, 2)


def measure(
    memories: int,
    stores: Path,
    seconds: float,
    hook_runs: int,
    mcp_calls: tuple[int, int],
    report: dict[str, Any],
) -> None:
    """Fill ``report`` figure by figure: what was measured stays when a later step fails."""
    store, built = ensure_store(stores, memories)
    data = Synthetic(memories, seed=memories)  # another stream than the build's
    coined = Synthetic(
        memories,
        seed=memories + 3,
        coined_per_memory=COINED_PER_MEMORY,
        coined_texts=agent_key_texts(),
    )
    with bench_home("km-sc-") as deployment:
        deployment.env["KEYMEM_HEARTBEAT_LIVENESS"] = LIVENESS  # a large store's long calls
        shutil.copy(store, graph_path(deployment.home))
        report.update({"memories": memories, "store": built})
        report["load_average_start"] = [round(x, 1) for x in os.getloadavg()]
        report["first_up_s"] = _up(deployment)
        endpoints = ipc_endpoints(deployment.home)
        with Client(endpoints.frontend) as client:
            report["lexicon_first_index_s"] = round(lexicon_serving(client, built["memories"]), 1)
            queries = _queries(data)
            for query in queries:  # each query's pool once, as recall_bench does
                client.call("memory", "search", query, timeout_ms=WARM_TIMEOUT_MS)
            report["key_index_at_search"] = _key_index_log(deployment.home)
            report["search"] = _search_loop(client, queries, seconds, rerank=True)
            report["lexicon_query"] = _lexicon_queries(client, queries)
            report["first_remember_s"] = _first_remember(client, data)
        report["memory"] = memory_mb(deployment)
        report["hook"] = _hook(deployment.home, deployment.env, queries, hook_runs)["hook"]
        report["mcp"] = {}
        try:  # the lexicon's restart and `up` after `down` do not depend on it
            asyncio.run(_mcp(deployment, data, coined, mcp_calls, report["mcp"]))
        except RuntimeError as exc:
            report["mcp_error"] = str(exc)
        with Client(endpoints.frontend) as client:
            report["lexicon_restart_s"] = lexicon_restart(client, built["memories"])
        deployment.keymem("down")
        report["file_mb"] = round(
            sum(p.stat().st_size for p in deployment.home.glob("graph.duckdb*")) / 2**20, 1
        )
        report["up_s"] = _up(deployment)
        with Client(endpoints.frontend) as client:
            waited = lexicon_serving(client, built["memories"])
            report["up_to_lexicon_ready_s"] = round(report["up_s"] + waited, 2)
        report["load_average"] = [round(x, 1) for x in os.getloadavg()]


def _cpu_ms(call: Any, rounds: int = 1) -> float:
    started = time.process_time()
    for _ in range(rounds):
        call()
    return round((time.process_time() - started) / rounds * 1000, 2)


def scan(keys: np.ndarray) -> dict[str, Any]:
    """CPU of the exact key scan (matrix x one query vector) in float32 and in float16."""
    query = keys[0].copy()
    half = keys.astype(np.float16)
    return {
        "keys_per_namespace": len(keys),
        "scan_f32_ms": _cpu_ms(lambda: keys @ query, SCAN_ROUNDS),
        "scan_f16_ms": _cpu_ms(lambda: half @ query.astype(np.float16), 3),
    }


def costs(memories: int, stores: Path) -> dict[str, Any]:
    """The graph's own costs on a copy of the built store, CPU ms (see the module doc)."""
    store, built = ensure_store(stores, memories)
    work = Path(tempfile.mkdtemp(prefix="km-sc-costs-", dir="/tmp"))
    try:
        path = graph_path(work)
        shutil.copy(store, path)
        opened = GraphStore(path)
        loaded: list[Any] = []
        out: dict[str, Any] = {"memories": memories, "store": built}
        out["startup_fetch_ms"] = _cpu_ms(lambda: loaded.append(opened.load()))
        out["startup_quarantine_ms"] = _cpu_ms(lambda: rows.quarantine(loaded[0]))
        out["startup_state_ms"] = _cpu_ms(lambda: GraphState(loaded[0], HUB_MIN_LINKS))
        opened.close()
        graph = GraphService(path)
        data = Synthetic(memories, seed=memories + 1)
        graph.remember(data.item())  # the lazy dedup index, outside the measurement
        graph.store.checkpoint()
        items = [data.item() for _ in range(CHECKPOINT_WRITES)]
        out["remember_ms"] = round(
            _cpu_ms(lambda: [graph.remember(i) for i in items]) / len(items), 2
        )
        out["wal_kb"] = round(graph.store.wal_bytes() / 1024)
        out["checkpoint_ms"] = _cpu_ms(graph.store.checkpoint)
        index = max(graph.state.indexes.values(), key=len)
        assert not index.halved  # halved only by the service loop's key_ann_tick
        out.update(scan(index.matrix[: len(index)]))
        graph.close()
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


FIGURES: tuple[tuple[str, str, Any], ...] = (
    ("search p50 ms", "ms", lambda r: r["search"]["round_trip"]["p50_ms"]),
    ("search p99 ms", "ms", lambda r: r["search"]["round_trip"]["p99_ms"]),
    ("hook p50 ms", "ms", lambda r: r["hook"]["p50_ms"]),
    ("hook p95 ms", "ms", lambda r: r["hook"]["p95_ms"]),
    ("MCP recall p50 ms", "ms", lambda r: r["mcp"]["recall"]["p50_ms"]),
    ("MCP remember, 1 client /s", "/s", lambda r: r["mcp"]["remember_1_client_per_s"]),
    (
        f"MCP remember, 1 client, {MCP_IN_FLIGHT} in flight /s",
        "/s",
        lambda r: r["mcp"][f"remember_in_flight_{MCP_IN_FLIGHT}_per_s"],
    ),
    ("MCP remember_batch 100 /s", "/s", lambda r: r["mcp"]["remember_batch_100_per_s"]),
    (
        "MCP remember, coined keys, 1 client /s",
        "/s",
        lambda r: r["mcp"]["remember_coined_1_client_per_s"],
    ),
    (
        "MCP remember_batch 100, coined keys /s",
        "/s",
        lambda r: r["mcp"]["remember_batch_100_coined_per_s"],
    ),
    (
        f"MCP remember_batch 100, first {MCP_BATCHES_BEFORE} /s",
        "/s",
        lambda r: r["mcp"][FIRST_BATCHES],
    ),
    ("lexicon query p50 ms", "ms", lambda r: r["lexicon_query"]["p50_ms"]),
    ("first remember s", "s", lambda r: r["first_remember_s"]),
    ("lexicon restart s", "s", lambda r: r["lexicon_restart_s"]),
    ("first keymem up s", "s", lambda r: r["first_up_s"]),
    ("lexicon first index s", "s", lambda r: r["lexicon_first_index_s"]),
    ("keymem up s", "s", lambda r: r["up_s"]),
    ("up to lexicon ready s", "s", lambda r: r["up_to_lexicon_ready_s"]),
    ("RSS total MB", "MB", lambda r: r["memory"]["rss_total_mb"]),
    ("PSS total MB", "MB", lambda r: r["memory"]["pss_total_mb"]),
    ("DuckDB file MB", "MB", lambda r: r["file_mb"]),
)


# The goals at 1M, drawn on their panels (docs/SCALING.md's table).
GOALS_AT_1M = {
    "search p50 ms": 60,
    "search p99 ms": 150,
    "hook p50 ms": 150,
    "MCP remember, 1 client /s": 300,
    "MCP remember_batch 100 /s": 1_000,
    "MCP remember, coined keys, 1 client /s": 300,
    "MCP remember_batch 100, coined keys /s": 1_000,
    "lexicon restart s": 8,
    "keymem up s": 30,
    "RSS total MB": 4_096,
}


def _figure(read: Any, row: dict[str, Any]) -> float | None:
    """A figure of ``row``, None when its run stopped before measuring it."""
    try:
        return float(read(row))
    except KeyError:
        return None


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| figure | " + " | ".join(f"{r['memories']:,} ({r['commit']})" for r in rows) + " |",
        "|---|" + "---:|" * len(rows),
    ]
    for label, _, read in FIGURES:
        shown = [_figure(read, r) for r in rows]
        lines.append(
            f"| {label} | " + " | ".join("—" if v is None else f"{v:,}" for v in shown) + " |"
        )
    for r in rows:
        processes = r.get("memory", {}).get("processes", [])
        per = ", ".join(f"{p['program']} {p['rss_mb']:.0f}/{p['pss_mb']:.0f}" for p in processes)
        lines.append(
            f"\n{r['memories']:,} at {r['commit']}: RSS/PSS MB per process: {per}; "
            f"load average {r.get('load_average_start')} at the start, {r['load_average']} at "
            f"the end; {r.get('error', 'complete')}"
            + (f"; MCP step: {r['mcp_error']}" if "mcp_error" in r else "")
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """One panel per figure: the newest commit measured as a line across the sizes it ran,
    every earlier commit's points in grey behind it, and the goal at 1M dashed."""
    runs = {
        commit: sorted((r for r in rows if r["commit"] == commit), key=lambda r: r["memories"])
        for commit in dict.fromkeys(r["commit"] for r in rows)
    }
    newest = list(runs)[-1]
    sizes = [r["memories"] for r in rows]
    span = (min(sizes) / 2, max(sizes) * 2)  # every panel on one axis, one size run or three
    columns = 4
    count = len(FIGURES)
    fig, axes = plt.subplots(-(-count // columns), columns, figsize=(16, 12))
    for ax, (label, unit, read) in zip(axes.flat, FIGURES, strict=False):
        for commit, run in runs.items():
            shown = [(r["memories"], value) for r in run if (value := _figure(read, r)) is not None]
            if not shown:
                continue
            if commit == newest:
                ax.plot(
                    *zip(*shown, strict=True),
                    marker="o",
                    lw=2,
                    color="C0",
                    zorder=3,
                    label=f"{newest or 'this run'} (newest)",
                )
            else:
                ax.plot(
                    *zip(*shown, strict=True),
                    marker=".",
                    ls=":",
                    color="0.6",
                    alpha=0.6,
                    label="earlier commits",
                )
        if label in GOALS_AT_1M:
            ax.axhline(GOALS_AT_1M[label], color="C3", ls="--", lw=1, label="goal at 1M")
        if ax.has_data():  # a run cut short has no value for the later figures
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlim(*span)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("memories")
        ax.set_ylabel(unit)
    for ax in list(axes.flat)[count:]:
        ax.axis("off")
    seen = {
        label: handle
        for ax in axes.flat
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True)
    }
    fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=len(seen))
    fig.suptitle("keymem on one 2-core machine: figures against store size")
    fig.tight_layout(rect=(0, 0.03, 1, 1))  # the legend's row below the panels
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--memories", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--stores", type=Path, default=Path("/tmp/km-scale5"))
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--hook-runs", type=int, default=20)
    parser.add_argument(
        "--mcp-calls", type=int, default=100, help="recalls, and remembers with 8 in flight"
    )
    parser.add_argument(
        "--remember-calls", type=int, default=1000, help="one client's sequential remembers"
    )
    parser.add_argument("--out", type=Path, default=Path("docs/scaling"))
    parser.add_argument("--commit", default="", help="the commit measured, kept in each row")
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="*",
        default=[],
        help="instead of measuring: the rows of these scale.json files into --out (a plot line "
        "per commit)",
    )
    parser.add_argument("--costs", action="store_true", help="the in-process cost breakdown")
    parser.add_argument(
        "--scan-keys",
        type=int,
        nargs="*",
        default=[],
        help="with --costs: also the key scan "
        "over this many random unit keys (a namespace of a store not built)",
    )
    args = parser.parse_args()
    if args.costs:
        threadpool_limits(limits=BLAS_THREADS)  # as the graph service process does
        rng = np.random.default_rng(0)
        for count in args.scan_keys:
            keys = rng.standard_normal((count, DIM)).astype(np.float32)
            print(json.dumps(scan(keys / np.linalg.norm(keys, axis=1, keepdims=True))), flush=True)
        for memories in args.memories:
            print(json.dumps(costs(memories, args.stores)), flush=True)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _interrupted)
    if args.merge:
        rows = [row for path in args.merge for row in json.loads(path.read_text())]
        (args.out / "scale.json").write_text(json.dumps(rows, indent=1))
        plot(rows, args.out / "scale.png")
        print(render(rows))
        return 0
    rows = []
    for memories in args.memories:
        row: dict[str, Any] = {"commit": args.commit, "memories": memories}
        try:
            measure(
                memories,
                args.stores,
                args.seconds,
                args.hook_runs,
                (args.mcp_calls, args.remember_calls),
                row,
            )
        except (Exception, KeyboardInterrupt) as exc:  # keep what was measured, and where it
            # stopped: a run cut short (^C, or SIGTERM: a background job ignores SIGINT)
            row["error"] = _cause(exc)
            row["load_average"] = [round(x, 1) for x in os.getloadavg()]
        rows.append(row)
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        (args.out / "scale.json").write_text(json.dumps(rows, indent=1))
        plot(rows, args.out / "scale.png")
    print(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
