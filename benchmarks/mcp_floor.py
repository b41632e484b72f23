"""What one sequential MCP client's remembers cost before keymem does any work: the floor.

    python -m benchmarks.mcp_floor [--calls 500] [--rounds 3] [--json OUT]

Spawns keymem's own MCP server (``build_server`` over ``stdio.serve``, as ``keymem mcp`` runs
it: the same tools, schemas, guard and request kernel) over a backend that answers every call
at once with a fresh memory id and never reaches a router. Against it, in alternating rounds,
one sequential client calls ``remember`` with the synthetic items ``write_rate`` sends, first
through the SDK's client (``mcp.Client`` over stdio, the issue's figure), then in plain
JSON-RPC lines (``write_rate.RawSession``, a host's client in its own process). For each:
remembers/s, p50 and mean ms, and the CPU ms per call of this process (the client) and of the
server.

A rate here is what no change behind the MCP server can exceed on this machine: with the
services added, a remember costs this plus the router's and the graph's share. Compare it with
``benchmarks.write_rate`` in the same hour; the ``reference_loop_s`` (a fixed pure-Python loop
timed in this process) says how fast the host was.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters, stdio_client

from benchmarks.deployment import timed_tool
from benchmarks.graph_bench import Synthetic
from benchmarks.host import host_loop_s
from benchmarks.write_rate import RawSession
from keymem.services.mcp.backend import MemoryBackend

SYNTHETIC_SIZE = 10_000  # the vocabulary the items' keys are drawn from, as write_rate's 10k
SERVE = [sys.executable, "-m", "benchmarks.mcp_floor", "--serve"]


class AnsweringBackend(MemoryBackend):
    """Answers each tool call at once, as a memory service whose write took no time would."""

    def __init__(self) -> None:
        super().__init__("inproc://unused", Path(tempfile.gettempdir()))

    async def call(
        self, method: str, body: dict[str, Any], *, timeout_ms: int | None = None
    ) -> Any:
        return {"saved": f"m_{uuid.uuid4().hex}"}


def serve() -> int:
    """The server side: keymem's MCP server on this process's stdio, over ``AnsweringBackend``."""
    import anyio

    from keymem.services.mcp.provenance import Provenance
    from keymem.services.mcp.server import build_server
    from keymem.services.mcp.stdio import serve as serve_stdio

    server = build_server(
        AnsweringBackend(), counts=None, provenance=Provenance(uuid.uuid4().hex[:12]), hook=False
    )
    anyio.run(serve_stdio, server)
    return 0


async def _timed_calls(
    calls: Sequence[Callable[[], Awaitable[float]]], server: psutil.Process
) -> dict[str, Any]:
    me = psutil.Process()

    def cpu(process: psutil.Process) -> float:
        times = process.cpu_times()
        return times.user + times.system

    before = cpu(me), cpu(server)
    started = time.perf_counter()
    seconds = [await call() for call in calls]
    wall = time.perf_counter() - started
    after = cpu(me), cpu(server)
    ms = np.array(seconds) * 1000
    return {
        "per_s": round(len(calls) / wall, 1),
        "call_p50_ms": round(float(np.percentile(ms, 50)), 2),
        "call_mean_ms": round(float(ms.mean()), 2),
        "cpu_ms_client": round((after[0] - before[0]) / len(calls) * 1000, 2),
        "cpu_ms_server": round((after[1] - before[1]) / len(calls) * 1000, 2),
        "load_average": round(os.getloadavg()[0], 1),
    }


async def _sdk_round(items: list[dict[str, Any]]) -> dict[str, Any]:
    params = StdioServerParameters(command=SERVE[0], args=SERVE[1:], env=dict(os.environ))
    with tempfile.TemporaryFile("w+") as errlog:
        async with McpClient(stdio_client(params, errlog=errlog)) as mcp:
            await timed_tool(mcp, "remember", items[0])  # the session's first call
            server = next(p for p in psutil.Process().children() if "--serve" in p.cmdline())
            calls = [functools.partial(timed_tool, mcp, "remember", item) for item in items[1:]]
            return await _timed_calls(calls, server)


async def _raw_round(items: list[dict[str, Any]]) -> dict[str, Any]:
    with tempfile.TemporaryFile("w+") as errlog:
        session = await RawSession.start(dict(os.environ), errlog, command=SERVE)
        try:
            await session.tool("remember", items[0])
            server = psutil.Process(session.process.pid)
            calls = [functools.partial(session.tool, "remember", item) for item in items[1:]]
            return await _timed_calls(calls, server)
        finally:
            await session.close()


def measure(calls: int, rounds: int) -> dict[str, Any]:
    data = Synthetic(SYNTHETIC_SIZE, seed=SYNTHETIC_SIZE + 17)
    report: dict[str, Any] = {"calls": calls, "rounds": []}
    for _ in range(rounds):
        items = [
            {k: v for k, v in data.item().items() if k != "key_vectors"} for _ in range(calls + 1)
        ]
        report["rounds"].append(
            {
                "reference_loop_s": host_loop_s(),
                "sdk_client": asyncio.run(_sdk_round(items)),
                "plain_client": asyncio.run(_raw_round(items)),
            }
        )
        print(json.dumps(report["rounds"][-1]), flush=True)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, default=500, help="sequential remembers per client")
    parser.add_argument("--rounds", type=int, default=3, help="alternating SDK / plain rounds")
    parser.add_argument("--json", type=Path, help="write the report here too")
    args = parser.parse_args()
    if args.serve:
        return serve()
    report = measure(args.calls, args.rounds)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
