"""The batch row of ``benchmarks.scale_1m`` in its run's order against batches after idle, on
one deployment.

    python -m benchmarks.batch_order --store 1000000=/tmp/kmB2/home1m [--rounds 4] [--idle-s 8]

``SIZE=PATH``: a stopped keymem home (copied whole: its lexicon cache and key indexes) or a
graph file. After `keymem up` and the lexicon's index it alternates, ``--rounds`` times:

- ``scale``: the hook ten times, then ``scale_1m``'s MCP step as it is (recalls, sequential
  and in-flight remembers, then its batches right after them, in its own session);
- ``idle``: a new session, one remember, ``--idle-s`` of nothing, then as many batches.

Each phase prints its batch rate (over the first three and over all), each batch's seconds,
every program's CPU ms a batched memory over the first three (psutil, as
``benchmarks.write_rate``), and the CPU seconds of a fixed Python loop beside it (how fast
the host runs now: docs/SCALING.md compares runs by it). Run it nice'd; a 1M store under
``flock /tmp/km1m.lock``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import psutil
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters, stdio_client

from benchmarks import scale_1m
from benchmarks.deployment import BenchHome, bench_home, timed_tool
from benchmarks.graph_bench import Synthetic, agent_key_texts
from benchmarks.host import host_loop_s
from benchmarks.recall_bench import LIVENESS, _hook, _queries, _wait_indexed
from benchmarks.write_rate import _cpu_ms_per, _cpu_s, _programs
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.store.database import graph_path

SCALE_CALLS = (40, 1000)  # scale_1m's --mcp-calls and --remember-calls at 1M
HOOK_RUNS = 10
INDEX_TIMEOUT_MS = 60_000


def _rates(out: dict[str, Any], seconds: list[float]) -> None:
    first = seconds[: scale_1m.MCP_BATCHES_BEFORE]
    out["remember_batch_100_per_s"] = round(scale_1m.MCP_BATCH * len(seconds) / sum(seconds), 1)
    out[scale_1m.FIRST_BATCHES] = round(scale_1m.MCP_BATCH * len(first) / sum(first), 1)
    out["remember_batch_100_s"] = [round(s, 3) for s in seconds]


async def after_idle(
    deployment: BenchHome, data: Synthetic, idle_s: float, out: dict[str, Any]
) -> None:
    """A session's first remember, ``idle_s`` of nothing, then ``scale_1m``'s batches."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "keymem.services.cli", "mcp"], env=deployment.env
    )
    count = scale_1m.MCP_BATCH * scale_1m.MCP_BATCHES
    items = [{k: v for k, v in data.item().items() if k != "key_vectors"} for _ in range(count + 1)]
    async with McpClient(stdio_client(params)) as mcp:
        timed = functools.partial(timed_tool, mcp)
        await timed("remember", items.pop())
        await asyncio.sleep(idle_s)
        server = next(p for p in psutil.Process().children(recursive=True) if "mcp" in p.cmdline())
        processes = _programs(deployment, server)
        before = _cpu_s(processes)
        seconds = []
        for i in range(0, count, scale_1m.MCP_BATCH):
            seconds.append(
                await timed("remember_batch", {"items": items[i : i + scale_1m.MCP_BATCH]})
            )
            if len(seconds) == scale_1m.MCP_BATCHES_BEFORE:
                first = scale_1m.MCP_BATCH * len(seconds)
                out["first_cpu_ms_per_memory"] = _cpu_ms_per(before, _cpu_s(processes), first)
        out["remember_batch_100_cpu_ms_per_memory"] = _cpu_ms_per(before, _cpu_s(processes), count)
        _rates(out, seconds)


def measure(size: int, store: Path, rounds: int, idle_s: float) -> list[dict[str, Any]]:
    phases = []
    with bench_home("km-bo-") as deployment:
        deployment.env["KEYMEM_HEARTBEAT_LIVENESS"] = LIVENESS
        if store.is_dir():
            shutil.copytree(store, deployment.home, dirs_exist_ok=True)
        else:
            shutil.copy(store, graph_path(deployment.home))
        deployment.keymem("up", "--timeout", scale_1m.UP_TIMEOUT_S)
        with Client(ipc_endpoints(deployment.home).frontend, timeout_ms=INDEX_TIMEOUT_MS) as client:
            _wait_indexed(client, client.call("graph", "counts", {})["memories"])
            backlog = client.call("graph", "vector_backlog", {"limit": 0})["missing"]
        data = Synthetic(size, seed=size + 41)  # another stream than the build's
        coined = Synthetic(
            size,
            seed=size + 43,
            coined_per_memory=scale_1m.COINED_PER_MEMORY,
            coined_texts=agent_key_texts(),
        )
        queries = _queries(data)
        for round_ in range(rounds):
            for phase in ("scale", "idle"):
                out: dict[str, Any] = {"memories": size, "phase": phase, "round": round_}
                out["vector_backlog_at_start"], out["host_loop_s"] = backlog, host_loop_s()
                out["load_average"] = round(os.getloadavg()[0], 2)
                if phase == "scale":
                    _hook(deployment.home, deployment.env, queries, HOOK_RUNS)
                    asyncio.run(scale_1m._mcp(deployment, data, coined, SCALE_CALLS, out))
                else:
                    asyncio.run(after_idle(deployment, data, idle_s, out))
                print(json.dumps(out), flush=True)
                phases.append(out)
    return phases


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--store", required=True, help="SIZE=PATH of a stopped home or a graph file"
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--idle-s", type=float, default=8.0)
    parser.add_argument("--json", type=Path, help="write the phases here too")
    args = parser.parse_args()
    size, _, path = args.store.partition("=")
    phases = measure(int(size), Path(path), args.rounds, args.idle_s)
    if args.json is not None:
        args.json.write_text(json.dumps(phases, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
