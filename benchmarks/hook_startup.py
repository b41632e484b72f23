"""The hook's start-up: wall time of a ``keymem-hook`` process that finds keymem down.

The host waits for the hook on every prompt, so its import and settings cost is paid each
time. With the services down the hook reads its settings, finds no router socket, records the
failure and exits: what is left is start-up. Runs are sequential; the median and p90 of wall
time are printed with the median CPU time (user + system, steadier on a busy machine) and the
modules the hook imported.

    python -m benchmarks.hook_startup [--runs 40]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PAYLOAD = json.dumps({"hook_event_name": "UserPromptSubmit", "prompt": "any snack ideas?"})
PROBE = "import sys, keymem.hooks.prompt_submit; print(len(sys.modules))"


def run_once(home: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one hook process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "keymem.hooks.prompt_submit"],
        input=PAYLOAD.encode(),
        capture_output=True,
        check=True,
        env={"KEYMEM_HOME": str(home), "PATH": "/usr/bin:/bin", **_python_path()},
    )
    wall_s = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall_s, cpu_s


def _python_path() -> dict[str, str]:
    """Keep a PYTHONPATH the caller set (to measure another tree)."""
    return {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="km-hook-", dir="/tmp") as tmp:
        home = Path(tmp)
        run_once(home)  # warm the page cache
        runs = [run_once(home) for _ in range(args.runs)]
        modules = subprocess.run(
            [sys.executable, "-c", PROBE],
            capture_output=True,
            text=True,
            check=True,
            env={"KEYMEM_HOME": str(home), **_python_path()},
        ).stdout.strip()
    wall_ms = sorted(1000 * wall for wall, _ in runs)
    cpu_ms = statistics.median(1000 * cpu for _, cpu in runs)
    p90 = wall_ms[int(0.9 * (len(wall_ms) - 1))]
    print(
        f"hook start-up, keymem down: wall median {statistics.median(wall_ms):.1f} ms, "
        f"p90 {p90:.1f} ms; CPU median {cpu_ms:.1f} ms; over {args.runs} runs; "
        f"{modules} modules imported"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
