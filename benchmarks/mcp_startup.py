"""``keymem mcp`` as a host starts it: spawn to ``initialize`` reply, cold and warm, in one run.

A host (Codex: 10 s by default) gives an MCP server a few seconds to answer the handshake.
Each round spawns ``keymem mcp`` through the MCP SDK's stdio client in a fresh KEYMEM_HOME
(cold: no services yet, the server starts them) and then once more in the same home (warm:
the services are up). For each it records the time from spawn to the ``initialize`` reply,
and to the first ``recall`` that succeeded (a call that met its deadline while the services
were still starting is made again). Medians over the rounds; the goal is a cold handshake
under 1.5x the warm one.

    python -m benchmarks.mcp_startup [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field

from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from benchmarks.deployment import BenchHome, bench_home

STILL_STARTING = "still starting"
GIVE_UP_S = 300.0
GOAL_RATIO = 1.5


@dataclass
class Runs:
    initialize_s: list[float] = field(default_factory=list)
    recall_s: list[float] = field(default_factory=list)
    retries: list[int] = field(default_factory=list)


async def start_once(home: BenchHome) -> tuple[float, float, int]:
    """Seconds from spawn to the initialize reply and to the first successful recall."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "keymem.services.cli", "mcp"], env=home.env
    )
    with tempfile.TemporaryFile("w+") as errlog:
        begun = time.perf_counter()
        async with Client(stdio_client(params, errlog=errlog)) as client:
            initialized = time.perf_counter() - begun
            retries = 0
            while True:
                result = await client.call_tool("recall", {"query": "startup probe"})
                text = getattr(result.content[0], "text", "") if result.is_error else ""
                if STILL_STARTING not in text:
                    break
                retries += 1
                if time.perf_counter() - begun > GIVE_UP_S:
                    raise RuntimeError(f"the services never came up: {text}")
            if result.is_error:
                errlog.seek(0)
                raise RuntimeError(f"recall failed: {text}\n{errlog.read()}")
            return initialized, time.perf_counter() - begun, retries


def row(label: str, values: list[float]) -> str:
    ordered = sorted(values)
    return f"| {label} | {statistics.median(ordered):.2f} ({ordered[0]:.2f}-{ordered[-1]:.2f}) |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cold, warm = Runs(), Runs()
    for round_no in range(args.rounds):
        with bench_home("km-mcpb-") as home:
            for runs in (cold, warm):
                initialized, recalled, retries = asyncio.run(start_once(home))
                runs.initialize_s.append(initialized)
                runs.recall_s.append(recalled)
                runs.retries.append(retries)
        print(
            f"round {round_no + 1}: cold initialize {cold.initialize_s[-1]:.2f} s, recall "
            f"{cold.recall_s[-1]:.2f} s; warm initialize {warm.initialize_s[-1]:.2f} s, "
            f"recall {warm.recall_s[-1]:.2f} s",
            flush=True,
        )
    print("\n| from spawn, median (range) | seconds |\n|---|---|")
    print(row("cold: initialize reply", cold.initialize_s))
    print(row("cold: first successful recall", cold.recall_s))
    print(row("warm: initialize reply", warm.initialize_s))
    print(row("warm: first successful recall", warm.recall_s))
    ratio = statistics.median(cold.initialize_s) / statistics.median(warm.initialize_s)
    print(
        f"\ncold / warm initialize: {ratio:.2f}x (goal < {GOAL_RATIO}x); recalls that met "
        f"their deadline while the services started: {sum(cold.retries)}"
    )


if __name__ == "__main__":
    main()
