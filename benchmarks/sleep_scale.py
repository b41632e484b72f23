"""``keymem sleep`` on a large store: how long a pass takes, for docs/BENCHMARKS.md.

    nice -n 10 python -m benchmarks.sleep_scale --memories 100000 [--json]

Builds the synthetic store of ``benchmarks.graph_bench`` (Zipf-shared keys over 4 namespaces)
in a temporary KEYMEM_HOME, teaches it some learning to decay (reads through keys, so links
grow above their start) and adds pairs sleep should find (keys of one form, near-duplicate and
contradicting texts), then runs ``keymem sleep --dry-run --json`` and ``keymem sleep --json``
as real processes on the file (keymem down: the command opens the file itself), reporting
wall time and what each pass did. Passes run in 50 ms slices, so wall time is the pass's
CPU plus the slicing, on whatever the box is doing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from benchmarks.graph_bench import Synthetic, build
from keymem.services.graph import GraphService
from keymem.services.graph.validity import SECONDS_PER_DAY
from keymem.store.database import graph_path

READS = 2_000  # memories read through a key, so their links carry learned weight
PLANTED = 200  # planted pairs of each kind
READ_AGE_DAYS = 31.0
LAST_PASS_AGE_DAYS = 30.0
# Noise on a form twin's key vectors ("ns0-concept-1" for "ns0 concept 1"), so the write path
# does not merge it by vector (cosine ~0.9, below the merge threshold) and sleep finds it by form.
FORM_TWIN_NOISE = 0.02


def plant(home: Path, data: Synthetic) -> None:
    """Reads to decay later, keys of one form, near duplicates and contradictions."""
    graph = GraphService(graph_path(home))
    try:
        for memory_id in list(graph.state.mem_links)[:READS]:
            key_id = next(iter(graph.state.mem_links[memory_id]))
            namespace = graph.state.memories[memory_id].namespace
            graph.read_memory(
                {"memory_id": memory_id, "via_key_id": key_id, "namespace": namespace}
            )
        items = []
        for i in range(PLANTED):
            base = data.item()
            name = "".join(chr(ord("a") + int(digit)) for digit in str(i))  # a pattern per pair
            noise = data.rng.standard_normal(base["key_vectors"].shape).astype(np.float32)
            noisy = base["key_vectors"] + FORM_TWIN_NOISE * noise
            twin = {
                **base,
                "keys": [k.replace(" ", "-") for k in base["keys"]],
                "key_vectors": noisy / np.linalg.norm(noisy, axis=1, keepdims=True),
            }
            items.append({**base, "content": f"the deploy of service {name} runs on Tuesday"})
            items.append({**twin, "content": f"the deploy of service {name} runs on Thursday"})
            items.append({**base, "content": f"note {name} says the cache holds recent data"})
            items.append({**base, "content": f"note {name} says the cache holds the recent data"})
        for start in range(0, len(items), 200):
            graph.remember_batch({"items": items[start : start + 200]})
    finally:
        graph.close()
    backdate(graph_path(home))


def backdate(path: Path) -> None:
    """As if the memories read were written and read a month ago and a pass had run since:
    their learning is unused."""
    now = time.time()
    conn = duckdb.connect(str(path))
    try:
        conn.execute(
            "UPDATE memories SET last_accessed = last_accessed - $age, created_at = created_at "
            "- $age WHERE access_count > 0",
            {"age": READ_AGE_DAYS * SECONDS_PER_DAY},
        )
        conn.execute(
            "INSERT OR REPLACE INTO meta VALUES ('slept_at', ?)",
            [repr(now - LAST_PASS_AGE_DAYS * SECONDS_PER_DAY)],
        )
    finally:
        conn.close()


def keymem_sleep(home: Path, *args: str) -> dict[str, Any]:
    env = {**os.environ, "KEYMEM_HOME": str(home)}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "keymem.services.cli", "sleep", "--json", *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    report: dict[str, Any] = json.loads(done.stdout)
    report["command_wall_s"] = round(time.perf_counter() - started, 2)
    report.pop("merges"), report.pop("flags")
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="keymem-sleep-") as tmp:
        home = Path(tmp)
        data = Synthetic(args.memories)
        built = build(home, data, args.memories)
        plant(home, data)
        out = {
            "store": built,
            "dry_run": keymem_sleep(home, "--dry-run"),
            "sleep": keymem_sleep(home),
            "again": keymem_sleep(home),
        }
    print(json.dumps(out, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
