"""The MCP front end alone over real stdio: CPU of the ``keymem mcp`` server per ``remember``.

    python -m benchmarks.mcp_stdio [--calls 300] [--rounds 8] [--tree NAME=DIR ...] [--in-flight K]

A real broker (ipc, in this process) with a ``memory`` service that answers ``remember`` (and
``remember_each``) at once stands in for the services, so what is measured is the server's own
work: the stdio transport, the SDK's JSON-RPC and validation, keymem's tool layer and its
router calls. Each ``--tree`` is a directory holding a ``keymem`` package (a worktree's root
linked as ``DIR/keymem``); the server of each runs with it first on ``PYTHONPATH``, alternating
round by round, so trees compare at the same load. Without ``--tree`` the installed keymem runs.
``--in-flight K`` keeps K calls in flight on the session (a host's parallel tool calls).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters, stdio_client

from keymem.protocol.endpoints import ipc_endpoints
from keymem.protocol.worker import Service
from keymem.services.stack import InprocStack

WARM_CALLS = 30  # the SDK's and the session's first-call costs, before the clock starts
ARGUMENTS = {
    "content": "synthetic memory 12 about alpha and beta and gamma",
    "keys": ["alpha", "beta", "gamma", "delta"],
    "namespace": "ns0",
}
# The server without its start-up flow: the stub broker is all there is to reach.
SERVER = """
import sys
import tempfile
from pathlib import Path
import anyio
from keymem.services.mcp.backend import MemoryBackend
from keymem.services.mcp.provenance import Provenance
from keymem.services.mcp.server import build_server
from keymem.services.mcp.stdio import serve
backend = MemoryBackend(sys.argv[1], Path(tempfile.gettempdir()))
server = build_server(backend, counts=None, provenance=Provenance("bench"), hook=False)
anyio.run(serve, server)
"""


SAVED = {"saved": "m" * 12, "seq": 1}


def stub_memory() -> Service:
    service = Service("memory")
    service.add("remember", lambda body: SAVED)
    service.add(
        "remember_each", lambda body: {"results": [{"result": SAVED} for _ in body["items"]]}
    )
    return service


async def one_server(
    frontend: str, pythonpath: str | None, calls: int, in_flight: int = 1
) -> dict[str, float]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    params = StdioServerParameters(command=sys.executable, args=["-c", SERVER, frontend], env=env)
    async with McpClient(stdio_client(params)) as mcp:
        for _ in range(WARM_CALLS):
            await mcp.call_tool("remember", ARGUMENTS)
        (server,) = [p for p in psutil.Process().children() if "-c" in p.cmdline()]
        before = server.cpu_times()
        seconds: list[float] = []
        pending = iter(range(calls))

        async def lane() -> None:
            for _ in pending:  # the lanes share one iterator: ``calls`` calls in all
                started = time.perf_counter()
                result = await mcp.call_tool("remember", ARGUMENTS)
                seconds.append(time.perf_counter() - started)
                if result.is_error:
                    raise RuntimeError(f"remember: {result.content}")

        await asyncio.gather(*(lane() for _ in range(in_flight)))
        after = server.cpu_times()
    cpu_s = after.user + after.system - before.user - before.system
    return {
        "cpu_ms_per_call": round(cpu_s / calls * 1000, 2),
        "p50_ms": round(float(np.percentile(seconds, 50)) * 1000, 2),
        "load_average": round(os.getloadavg()[0], 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--tree", action="append", default=[], help="NAME=DIR, repeatable")
    parser.add_argument(
        "--in-flight", type=int, default=1, help="calls in flight at once on the one session"
    )
    args = parser.parse_args()
    trees: list[tuple[str, str | None]] = [
        (name, path) for name, _, path in (spec.partition("=") for spec in args.tree)
    ] or [("installed", None)]
    home = Path(tempfile.mkdtemp(prefix="km-mcp-", dir="/tmp"))
    (home / "run").mkdir()
    endpoints = ipc_endpoints(home)
    rows: list[dict[str, Any]] = []
    try:
        with InprocStack(endpoints=endpoints) as stack:
            stack.add_worker(stub_memory())
            for round_ in range(args.rounds):
                for name, path in trees:
                    served = one_server(endpoints.frontend, path, args.calls, args.in_flight)
                    row = asyncio.run(served)
                    rows.append({"round": round_, "tree": name, **row})
                    print(rows[-1], flush=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    for name, _ in trees:
        mine = [r for r in rows if r["tree"] == name]
        print(
            f"{name}: CPU ms per call mean {np.mean([r['cpu_ms_per_call'] for r in mine]):.2f}, "
            f"p50 ms median {np.median([r['p50_ms'] for r in mine]):.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
