"""A throwaway real deployment for benchmarks: a fresh short KEYMEM_HOME, `keymem` as a
subprocess, and `keymem down` plus cleanup however the measurement ends."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp import Client as McpClient

from keymem.services.supervision import SHUTDOWN_TIMEOUT_S

CLI_TIMEOUT_S = 1_800
# `keymem down` waits for the slowest program's stop and supervisord's exit; then the CLI's start
DOWN_TIMEOUT_S = SHUTDOWN_TIMEOUT_S + 30


@dataclass(frozen=True)
class BenchHome:
    home: Path
    env: dict[str, str]

    def keymem(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "keymem.services.cli", *args],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
            timeout=CLI_TIMEOUT_S,
        )


def home_env(home: Path) -> dict[str, str]:
    """This process's environment with ``home`` as the only keymem setting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYMEM_")}
    env["KEYMEM_HOME"] = str(home)
    return env


@contextlib.contextmanager
def bench_home(prefix: str) -> Iterator[BenchHome]:
    home = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))  # short: ipc paths < 107 bytes
    env = home_env(home)
    try:
        yield BenchHome(home, env)
    finally:
        subprocess.run(
            [sys.executable, "-m", "keymem.services.cli", "down"],
            env=env,
            capture_output=True,
            timeout=DOWN_TIMEOUT_S,
        )
        shutil.rmtree(home, ignore_errors=True)


async def timed_tool(mcp: McpClient, tool: str, args: dict[str, Any]) -> float:
    """Seconds one MCP tool call took; a tool error ends the measurement."""
    started = time.perf_counter()
    result = await mcp.call_tool(tool, args)
    if result.is_error:
        raise RuntimeError(f"{tool}: {result.content}")
    return time.perf_counter() - started
