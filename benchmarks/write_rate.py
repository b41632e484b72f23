"""Durable remember throughput through MCP, and where each write's CPU goes, per store size.

    python -m benchmarks.write_rate --store 10000=/tmp/km-scale/store-10000/graph.duckdb
        --store 100000=/tmp/km-scale/store-100000/graph.duckdb [--calls 1000] [--batches 3]

For each ``SIZE=PATH`` (a graph file: ``benchmarks.scale_1m`` builds them under its
``--stores``; one that a `keymem up` has already re-embedded with the default embedder starts
in seconds, not minutes; a directory is a stopped keymem home, copied whole with its lexicon
cache, so a 1M store needs no first index per run) it starts the real deployment on a copy
(`keymem up`), spawns `keymem mcp` over stdio with the SDK's client, and measures:

- ``remember`` from one sequential client (remembers/s, p50), 3-6 keys drawn Zipf-like from the
  store's vocabulary (``benchmarks.graph_bench.Synthetic``), so most keys already exist; with
  ``--coined-per-memory X`` each memory also coins X keys on average, as an agent's do (texts
  made of the dev files' agent keys, which the memory service embeds);
- ``remember_batch`` of ``--batch-size`` from the same client (memories/s);
- with ``--raw-client``, the sequential and in-flight remember phases again from a plain
  JSON-RPC client (``RawSession``: lines on the server's pipes, the handshake era a host such
  as Claude Code speaks), so the server's rate shows without the SDK client's CPU in this
  process — a host's client is its own process (Claude Code runs node), the SDK's rows stay
  the issue's figure;
- with ``--in-flight K ...``, ``--calls`` remembers from the same session with K calls in
  flight at once for each K (a host's parallel tool calls; the server sends the calls that
  arrive while one is on its way together: services/mcp/coalesce.py);
- for each phase, the CPU every process of the deployment spent per memory written (the MCP
  server, the router with the memory service, the graph, the models, the lexicon), so a loaded
  box's wall time can be read as the CPU it stands for.

``--hops N`` first takes one remember apart hop by hop, from a plain client on the router's
front end (no MCP): the router alone (``router.ping``), the graph's key-vector lookup
(``graph.held_vectors``, which a correction makes), the graph's durable write with vectors
already attached (``graph.remember``), the memory service's whole ``remember`` (the write
without vectors, its held keys filed by their text, sent again with a new key's vector after
the graph names it; the reranker's warm-up), and the same through MCP; for each, p50 wall
and every process's CPU per call, so the difference between two rows is what one hop costs.

It measures once the lexicon has indexed the whole store (it does after every start), so
that work is not counted as the writes'; ``--during-index`` measures at once instead, while the
lexicon's first index reads the graph's change feed (at 1M ~10 minutes of it: the writes then
share the box, and their figures carry the lexicon's CPU).

``--statements`` instead opens a copy of each store in this process and times one durable
``remember`` (an idempotency key, as MCP sends) by part: the graph's own work, each SQL
statement of the write-behind's transactions (wall and CPU) and the checkpoints, with the
logged writes folded into the file and the checkpoints checked on the worker's timers; with
``--statement-batch N`` each call is a ``remember_batch`` of N, and every figure is per memory.
A directory for ``--store`` there is a stopped home: its graph file and its saved approximate
key indexes are copied, and the timing starts once those serve. ``--new-keys N`` adds N keys
the store has never seen to every memory (unique texts, random unit vectors: the worst case
for the approximate index), as an agent's writes coin them; the synthetic keys alone coin
~0.03-0.05 a memory.

Run it nice'd on the shared box. To compare two trees, run it once with each tree's
``keymem`` first on ``PYTHONPATH``: the deployment and the MCP server inherit it.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters, stdio_client

from benchmarks.deployment import BenchHome, bench_home, timed_tool
from benchmarks.footprint import deployment_processes
from benchmarks.graph_bench import Synthetic, agent_key_texts
from benchmarks.recall_bench import _wait_indexed
from keymem.protocol.client import Client, with_idempotency_key
from keymem.protocol.endpoints import ipc_endpoints
from keymem.protocol.worker import Timer
from keymem.services.graph import GraphService, keyann
from keymem.services.graph import service as graph_service
from keymem.store.database import graph_path

UP_TIMEOUT_S = "1800"
# The raw client's handshake: the newest handshake-era version, as Claude Code and Codex speak.
RAW_PROTOCOL = "2025-11-25"
RAW_CLIENT = {"name": "write_rate-raw", "version": "1"}
RAW_LINE_LIMIT_BYTES = 16 * 1024 * 1024  # a reply line the raw client reads whole
LIVENESS = "30"  # heartbeat intervals: a re-embedding's long calls at start
COUNTS_TIMEOUT_MS = 60_000  # one pass over every memory
KEY_INDEX_WAIT_S = 600.0  # --statements: a saved index loads in seconds, a build takes minutes
SETTLE_S = 3.0  # after a phase: the lexicon and the reranker finish what it gave them
IDLE_S = 3.0  # the deployment's CPU with nothing asked of it (heartbeats, timers), per second
KEYMEM_MCP = (sys.executable, "-m", "keymem.services.cli", "mcp")


def _programs(deployment: BenchHome, mcp_server: psutil.Process | None) -> list[psutil.Process]:
    """Every process a write costs CPU in: the deployment's, the MCP server, and this one (the
    benchmark's client shares the cores)."""
    processes = [*deployment_processes(deployment), psutil.Process()]
    return processes + ([mcp_server] if mcp_server is not None else [])


def _name(process: psutil.Process) -> str:
    """The program a process runs: ``keymem.services <name>``'s name, the MCP server, or
    ``client`` (this benchmark)."""
    if process.pid == os.getpid():
        return "client"
    args = process.cmdline()
    if "mcp" in args:
        return "mcp"
    return args[-1] if args else str(process.pid)


def _cpu_s(processes: list[psutil.Process]) -> dict[str, float]:
    """CPU seconds (user + system) per program, summed over its processes."""
    out: dict[str, float] = {}
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        name = _name(process)
        out[name] = out.get(name, 0.0) + times.user + times.system
    return out


def _cpu_ms_per(before: dict[str, float], after: dict[str, float], count: int) -> dict[str, float]:
    """Each program's CPU ms per call (or memory) between two ``_cpu_s``, and ``all`` of them."""
    spent = {name: (after[name] - before.get(name, 0.0)) / count * 1000 for name in sorted(after)}
    return {name: round(ms, 2) for name, ms in [*spent.items(), ("all", sum(spent.values()))]}


async def _phase(
    processes: list[psutil.Process],
    memories: int,
    calls: Sequence[Callable[[], Awaitable[float]]],
    in_flight: int = 1,
) -> dict[str, Any]:
    """Run ``calls`` with ``in_flight`` of them at once on the one session (1: one after
    another); rate, p50 and each program's CPU ms per memory: over the calls and the settling
    after them (what the writes cost in all, the idle-time passage vectors of memories without
    one included), and over the calls alone."""
    before = _cpu_s(processes)
    load = os.getloadavg()[0]
    pending = iter(calls)
    seconds: list[float] = []

    async def lane() -> None:
        for call in pending:  # the lanes share one iterator: each call is made once
            seconds.append(await call())

    started = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(in_flight)))
    wall = time.perf_counter() - started
    during = _cpu_s(processes)
    await asyncio.sleep(SETTLE_S)
    after = _cpu_s(processes)
    calls_ms = np.array(seconds) * 1000
    return {
        "per_s": round(memories / wall, 1),
        "call_p50_ms": round(float(np.percentile(calls_ms, 50)), 1),
        # the rate follows the mean: a few slow calls (a fold, a busy core) weigh as much as
        # a faster median
        "call_mean_ms": round(float(calls_ms.mean()), 1),
        "call_p90_ms": round(float(np.percentile(calls_ms, 90)), 1),
        "call_p99_ms": round(float(np.percentile(calls_ms, 99)), 1),
        "cpu_ms_per_memory": _cpu_ms_per(before, after, memories),
        "cpu_ms_per_memory_calls": _cpu_ms_per(before, during, memories),
        "load_average": [round(load, 1), round(os.getloadavg()[0], 1)],
    }


def _hop(processes: list[psutil.Process], calls: list[Callable[[], Any]]) -> dict[str, Any]:
    """Run ``calls`` (blocking) one after another: p50 wall and each program's CPU ms per call
    (with what the deployment spends idle over as long: ``_idle_cpu``)."""
    before = _cpu_s(processes)
    load = os.getloadavg()[0]
    seconds = []
    for call in calls:
        started = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - started)
    time.sleep(SETTLE_S)
    after = _cpu_s(processes)
    return {
        "p50_ms": round(float(np.percentile(seconds, 50)) * 1000, 2),
        "seconds": round(sum(seconds) + SETTLE_S, 1),
        "cpu_ms_per_call": _cpu_ms_per(before, after, len(calls)),
        "load_average": [round(load, 1), round(os.getloadavg()[0], 1)],
    }


def _memory_requests(router: Client) -> int:
    """The requests the router has passed to the ``memory`` service so far."""
    return int(router.call("router", "stats")["services"]["memory"]["requests"])


async def _counted(
    deployment: BenchHome,
    processes: list[psutil.Process],
    calls: Sequence[Callable[[], Awaitable[float]]],
    in_flight: int,
) -> dict[str, Any]:
    """``_phase`` of one remember per call, with the memory requests the calls took (the MCP
    server's trips: services/mcp/coalesce.py)."""
    with Client(ipc_endpoints(deployment.home).frontend) as router:
        sent = _memory_requests(router)
        phase = await _phase(processes, len(calls), calls, in_flight)
        phase["memory_requests"] = _memory_requests(router) - sent
    return phase


def _idle_cpu(processes: list[psutil.Process]) -> dict[str, float]:
    """Each program's CPU ms per second with no request: subtract it times a hop's seconds."""
    before = _cpu_s(processes)
    time.sleep(IDLE_S)
    after = _cpu_s(processes)
    return {name: round((after[name] - before.get(name, 0.0)) / IDLE_S * 1000, 2) for name in after}


def _with_vectors(client: Client, item: dict[str, Any]) -> dict[str, Any]:
    """``item`` with its keys' vectors as the memory service attaches them: the graph's stored
    vector of a key it holds, the embedder's for the others."""
    lookup = {"keys": item["keys"], "namespace": item["namespace"]}
    held = client.call("graph", "held_vectors", lookup)
    found = [k for k, h in zip(item["keys"], held["held"], strict=True) if h]
    vectors = dict(zip(found, held["vectors"], strict=True))
    missing = [k for k in item["keys"] if k not in vectors]
    fingerprint = held["fingerprint"]
    if missing:
        embedded = client.call("embedder", "embed", {"texts": missing, "kind": "key"})
        vectors.update(zip(missing, embedded["vectors"], strict=True))
        fingerprint = embedded["fingerprint"]
    matrix = np.stack([vectors[k] for k in item["keys"]])
    return {**item, "key_vectors": matrix, "fingerprint": fingerprint}


def _hops(deployment: BenchHome, data: Synthetic, calls: int) -> dict[str, Any]:
    """One remember taken apart hop by hop (see the module doc), ``calls`` of each."""
    processes = _programs(deployment, None)
    items = [{k: v for k, v in data.item().items() if k != "key_vectors"} for _ in range(3 * calls)]
    with Client(ipc_endpoints(deployment.home).frontend) as client:

        def call(service: str, method: str, body: Any) -> Callable[[], Any]:
            return lambda: client.call(service, method, body)

        lookups = [{"keys": i["keys"], "namespace": i["namespace"]} for i in items[:calls]]
        writes = [
            with_idempotency_key(_with_vectors(client, item)) for item in items[calls : 2 * calls]
        ]
        remembers = [with_idempotency_key(item) for item in items[2 * calls :]]
        client.call("memory", "remember", remembers.pop())  # the first write's one-off costs
        return {
            "idle_cpu_ms_per_s": _idle_cpu(processes),
            "router.ping": _hop(processes, [call("router", "ping", {}) for _ in range(calls)]),
            "graph.held_vectors": _hop(
                processes, [call("graph", "held_vectors", body) for body in lookups]
            ),
            "graph.remember": _hop(processes, [call("graph", "remember", b) for b in writes]),
            "memory.remember": _hop(processes, [call("memory", "remember", b) for b in remembers]),
        }


async def _measure_mcp(
    deployment: BenchHome,
    data: Synthetic,
    calls: int,
    batches: int,
    batch_size: int,
    in_flight: list[int],
) -> dict[str, Any]:
    params = StdioServerParameters(
        command=KEYMEM_MCP[0], args=list(KEYMEM_MCP[1:]), env=deployment.env
    )
    items = [
        {k: v for k, v in data.item().items() if k != "key_vectors"}
        for _ in range(calls * (1 + len(in_flight)) + batches * batch_size)
    ]
    with tempfile.TemporaryFile("w+") as errlog:
        async with McpClient(stdio_client(params, errlog=errlog)) as mcp:
            timed = functools.partial(timed_tool, mcp)

            await timed("remember", items.pop())  # the session's and the dedup index's first
            server = next(
                p for p in psutil.Process().children(recursive=True) if "mcp" in p.cmdline()
            )
            processes = _programs(deployment, server)

            def remember(item: dict[str, Any]) -> Callable[[], Awaitable[float]]:
                return lambda: timed("remember", item)

            def batch(start: int) -> Callable[[], Awaitable[float]]:
                return lambda: timed("remember_batch", {"items": items[start : start + batch_size]})

            single = await _phase(processes, calls, [remember(item) for item in items[:calls]])
            batched = await _phase(
                processes,
                batches * batch_size,
                [batch(calls + i * batch_size) for i in range(batches)],
            )
            concurrent = {}
            start = calls + batches * batch_size
            for k in in_flight:
                lot = items[start : start + calls]
                start += calls
                phase = await _counted(deployment, processes, [remember(i) for i in lot], k)
                concurrent[f"remember_in_flight_{k}"] = phase
    return {"remember": single, f"remember_batch_{batch_size}": batched, **concurrent}


class RawSession:
    """``keymem mcp`` spoken to in plain JSON-RPC lines, as a host that is its own process
    would (the handshake era Claude Code and Codex use): what the server costs without the
    SDK's client in the benchmark's process."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.ids = iter(range(1, 1 << 62))
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def start(
        cls, env: dict[str, str], errlog: Any, command: Sequence[str] = KEYMEM_MCP
    ) -> RawSession:
        """``command`` (default ``keymem mcp``) spawned and through its ``initialize``."""
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=errlog,
            env=env,
            limit=RAW_LINE_LIMIT_BYTES,
        )
        session = cls(process)
        hello = {"protocolVersion": RAW_PROTOCOL, "capabilities": {}, "clientInfo": RAW_CLIENT}
        await session.request("initialize", hello)
        session._send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return session

    def _send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            message = json.loads(line)
            waiting = self.waiting.pop(message.get("id"), None)
            if waiting is not None:
                waiting.set_result(message)

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self.ids)
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[request_id] = answer
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        reply = await answer
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply["result"]
        return result

    async def tool(self, name: str, arguments: dict[str, Any]) -> float:
        """Seconds one tool call took; a tool error ends the measurement."""
        started = time.perf_counter()
        result = await self.request("tools/call", {"name": name, "arguments": arguments})
        if result.get("isError"):
            raise RuntimeError(f"{name}: {result['content']}")
        return time.perf_counter() - started

    async def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        await self.process.wait()
        self.reader.cancel()


async def _measure_raw(
    deployment: BenchHome, data: Synthetic, calls: int, in_flight: list[int]
) -> dict[str, Any]:
    """The remember phases again from ``RawSession`` instead of the SDK's client."""
    items = [
        {k: v for k, v in data.item().items() if k != "key_vectors"}
        for _ in range(calls * (1 + len(in_flight)) + 1)
    ]
    report: dict[str, Any] = {}
    with tempfile.TemporaryFile("w+") as errlog:
        session = await RawSession.start(deployment.env, errlog)
        try:
            await session.tool("remember", items.pop())
            server = psutil.Process(session.process.pid)
            processes = _programs(deployment, server)
            for k in [1, *in_flight]:
                lot, items = items[:calls], items[calls:]
                calls_k = [functools.partial(session.tool, "remember", item) for item in lot]
                report[f"raw_remember_in_flight_{k}"] = await _counted(
                    deployment, processes, calls_k, k
                )
        finally:
            await session.close()
    return report


def measure(
    size: int,
    store: Path,
    calls: int,
    batches: int,
    batch_size: int,
    during_index: bool,
    hops: int,
    in_flight: list[int],
    raw_client: bool,
    coined_per_memory: float = 0.0,
) -> dict[str, Any]:
    with bench_home("km-wr-") as deployment:
        deployment.env["KEYMEM_HEARTBEAT_LIVENESS"] = LIVENESS
        if store.is_dir():  # a whole stopped home: its lexicon cache too, so no first index
            shutil.copytree(store, deployment.home, dirs_exist_ok=True)
        else:
            shutil.copy(store, graph_path(deployment.home))
        started = time.perf_counter()
        deployment.keymem("up", "--timeout", UP_TIMEOUT_S)
        report: dict[str, Any] = {
            "memories": size,
            "coined_per_memory": coined_per_memory,
            "up_s": round(time.perf_counter() - started, 1),
        }
        if not during_index:
            with Client(
                ipc_endpoints(deployment.home).frontend, timeout_ms=COUNTS_TIMEOUT_MS
            ) as client:
                # the lexicon indexes the whole store after a start: wait, or its CPU is counted
                active = client.call("graph", "counts", {})["memories"]
                report["lexicon_index_s"] = round(_wait_indexed(client, active), 1)
        data = Synthetic(  # another stream than the build's
            size,
            seed=size + 17,
            coined_per_memory=coined_per_memory,
            coined_texts=agent_key_texts() if coined_per_memory else (),
        )
        if hops:
            report["hops"] = _hops(deployment, data, hops)
        measured = _measure_mcp(deployment, data, calls, batches, batch_size, in_flight)
        report.update(asyncio.run(measured))
        if raw_client:
            report.update(asyncio.run(_measure_raw(deployment, data, calls, in_flight)))
    return report


class TimedConnection:
    """A DuckDB connection that adds each statement's wall and CPU seconds to a table, by the
    statement's first three words (``INSERT INTO memories``)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.wall_s: dict[str, float] = defaultdict(float)
        self.cpu_s: dict[str, float] = defaultdict(float)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)

    def execute(self, sql: str, *args: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return self.conn.execute(sql, *args)
        finally:
            kind = " ".join(sql.split()[:3])
            self.wall_s[kind] += time.perf_counter() - wall
            self.cpu_s[kind] += time.process_time() - cpu


def _wait_key_indexes(graph: GraphService) -> None:
    """Until every namespace's approximate key index serves (loaded, or built), so the timing
    does not share the box with a build."""
    deadline = time.monotonic() + KEY_INDEX_WAIT_S
    while time.monotonic() < deadline:
        graph.key_ann_tick()
        waiting = [
            index
            for index in graph.state.indexes.values()
            if index.approximate is not None and not index.approximate.ready()
        ]
        if not waiting and not any(
            index.approximate is None and index.concept_count() >= graph.key_ann.min_keys > 0
            for index in graph.state.indexes.values()
        ):
            return
        time.sleep(0.2)
    raise TimeoutError(f"the key indexes did not serve within {KEY_INDEX_WAIT_S} s")


def _with_new_keys(item: dict[str, Any], count: int, rng: np.random.Generator) -> dict[str, Any]:
    """``item`` with ``count`` more keys no store holds (unique texts, random unit vectors)."""
    if count == 0:
        return item
    vectors = rng.standard_normal((count, item["key_vectors"].shape[1])).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    coined = [f"coined {rng.integers(1 << 62):x}" for _ in range(count)]
    return {
        **item,
        "keys": [*item["keys"], *coined],
        "key_vectors": np.vstack([item["key_vectors"], vectors]),
    }


def statements(size: int, store: Path, calls: int, batch: int, new_keys: int = 0) -> dict[str, Any]:
    """Durable remembers (``batch`` > 1: remember_batch calls of that many) in process, by
    part (ms per memory; see the module doc)."""
    work = Path(tempfile.mkdtemp(prefix="km-wr-sql-", dir="/tmp"))
    try:
        if store.is_dir():
            shutil.copy(graph_path(store), graph_path(work))
            if (store / keyann.DIRECTORY).is_dir():
                shutil.copytree(store / keyann.DIRECTORY, work / keyann.DIRECTORY)
        else:
            shutil.copy(store, graph_path(work))
        graph = GraphService(graph_path(work))
        _wait_key_indexes(graph)
        data = Synthetic(size, seed=size + 29)
        graph.remember(data.item())  # the session's first write, as a deployment's
        graph.store.checkpoint()
        coined = np.random.default_rng(size + 31)

        def item() -> dict[str, Any]:
            return _with_new_keys(data.item(), new_keys, coined)

        bodies: list[dict[str, Any]]
        if batch > 1:
            prepare, method = graph.prepare_remember_batch, "remember_batch"
            bodies = [{"items": [item() for _ in range(batch)]} for _ in range(calls)]
        else:
            prepare, method = graph.prepare_remember, "remember"
            bodies = [item() for _ in range(calls)]
        timed = TimedConnection(graph.store.conn)
        graph.store.conn = timed  # type: ignore[assignment]
        wall, cpu = time.perf_counter(), time.process_time()
        timers = [
            Timer(graph_service.WRITE_BEHIND_INTERVAL_S, graph.fold_due),
            Timer(graph_service.CHECKPOINT_CHECK_INTERVAL_S, graph.checkpoint_due),
        ]
        for body in bodies:
            body["idempotency_key"] = uuid.uuid4().hex  # as MCP sends
            graph.write_group(prepare, [body], method)
            for timer in timers:  # as the worker's serving loop runs them between requests
                if time.monotonic() >= timer.due_at:
                    timer.due_at = time.monotonic() + timer.interval_s
                    timer.action()
            while graph.settle_keys():  # its idle work: no request waits in this closed loop
                pass
        graph.flush_due()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        graph.store.conn = timed.conn
        graph.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def per_memory_ms(seconds: float) -> float:
        return round(seconds / (calls * batch) * 1000, 3)

    return {
        "memories": size,
        "batch": batch,
        "new_keys": new_keys,
        "remember_ms": {"wall": per_memory_ms(wall), "cpu": per_memory_ms(cpu)},
        "sql_ms": {
            kind: {
                "wall": per_memory_ms(timed.wall_s[kind]),
                "cpu": per_memory_ms(timed.cpu_s[kind]),
            }
            for kind in sorted(timed.cpu_s, key=lambda k: -timed.cpu_s[k])
        },
        "load_average": round(os.getloadavg()[0], 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--store",
        action="append",
        required=True,
        help="SIZE=PATH of a graph file or a stopped home, repeatable",
    )
    parser.add_argument(
        "--calls",
        type=int,
        default=1000,
        help="sequential remembers (the rate is the mean call's: ~100 calls are one fold away)",
    )
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--statements", action="store_true", help="in process, by SQL statement")
    parser.add_argument(
        "--statement-batch", type=int, default=1, help="with --statements: remember_batch of N"
    )
    parser.add_argument(
        "--new-keys", type=int, default=0, help="with --statements: N unseen keys a memory"
    )
    parser.add_argument(
        "--coined-per-memory",
        type=float,
        default=0.0,
        help="keys no store holds a memory, on average, as an agent coins them (real agent keys "
        "of the dev files, paired); 0: the Zipf stream's keys alone",
    )
    parser.add_argument(
        "--during-index", action="store_true", help="measure while the lexicon's first index runs"
    )
    parser.add_argument(
        "--hops", type=int, default=0, help="first, N calls of each hop of one remember"
    )
    parser.add_argument(
        "--in-flight",
        type=int,
        nargs="*",
        default=[],
        help="then --calls remembers with K calls in flight on the one session, per K",
    )
    parser.add_argument(
        "--raw-client",
        action="store_true",
        help="then the remember phases again from a plain JSON-RPC client instead of the SDK's",
    )
    parser.add_argument("--json", type=Path, help="write the report here too")
    args = parser.parse_args()
    rows = []
    for spec in args.store:
        size, _, path = spec.partition("=")
        if args.statements:
            rows.append(
                statements(int(size), Path(path), args.calls, args.statement_batch, args.new_keys)
            )
        else:
            rows.append(
                measure(
                    int(size),
                    Path(path),
                    args.calls,
                    args.batches,
                    args.batch_size,
                    args.during_index,
                    args.hops,
                    args.in_flight,
                    args.raw_client,
                    args.coined_per_memory,
                )
            )
        print(json.dumps(rows[-1]), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
