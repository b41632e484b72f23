"""What the memories table's primary key costs the graph's folds, in DuckDB alone.

    python -m benchmarks.primary_key_cost --store /tmp/km-scale5-v8/store-1000000/graph.duckdb
        [--folds 20] [--variant random|ordered|no-key]

On a copy of the store: ``--folds`` transactions shaped like a fold of one ``remember_batch`` of
100 (100 memory rows, 450 link rows, 100 event rows, two point updates of existing memories, as
reads' access counts make), one checkpoint after half of them. Variants: ``random`` inserts the
graph's random 16-hex ids, ``ordered`` time-ordered ids (milliseconds, then a counter), and
``no-key`` copies the memories table without its primary key first. Prints ms of CPU per
memory per statement, the checkpoint's ms and a point update's ms. Run it nice'd, under
``flock /tmp/km1m.lock`` at 1M.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import secrets
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from keymem.store.database import memory_row
from keymem.store.records import MemoryRecord

BATCH = 100
LINKS_PER_BATCH = 450  # 4.5 keys a memory, as the synthetic stores
UPDATES_PER_FOLD = 2
ID_HEX_BYTES = 8
MILLIS_MASK = (1 << 48) - 1
COUNTER_MASK = (1 << 16) - 1


def _id_maker(variant: str) -> Callable[[], str]:
    counter = itertools.count()
    if variant == "ordered":
        return lambda: (
            f"{int(time.time() * 1000) & MILLIS_MASK:012x}{next(counter) & COUNTER_MASK:04x}"
        )
    return lambda: secrets.token_hex(ID_HEX_BYTES)


def _unnest_insert(table: str, types: list[str]) -> str:
    return f"INSERT INTO {table} SELECT " + ", ".join(f"unnest(?::{t}[])" for t in types)


def _row(values: list[Any], width: int) -> list[Any]:
    """``values`` cut or padded with NULLs to the table's width."""
    return (values + [None] * width)[:width]


def measure(store: Path, folds: int, variant: str) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="km-pk-", dir="/tmp"))
    try:
        copy = work / "graph.duckdb"
        shutil.copy(store, copy)
        conn = duckdb.connect(str(copy))
        if variant == "no-key":
            conn.execute(
                "CREATE TABLE plain AS SELECT * FROM memories; DROP TABLE memories; "
                "ALTER TABLE plain RENAME TO memories; CHECKPOINT"
            )
        types = {
            table: [row[1] for row in conn.execute(f"DESCRIBE {table}").fetchall()]
            for table in ("memories", "links", "events")
        }
        seq = int(conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchall()[0][0])
        keys = [r[0] for r in conn.execute("SELECT id FROM keys USING SAMPLE 2000").fetchall()]
        touched = [
            r[0] for r in conn.execute("SELECT id FROM memories USING SAMPLE 200").fetchall()
        ]
        new_id = _id_maker(variant)
        cpu_s: dict[str, float] = defaultdict(float)

        def run(kind: str, sql: str, params: list[Any]) -> None:
            started = time.process_time()
            conn.execute(sql, params)
            cpu_s[kind] += time.process_time() - started

        for fold in range(folds):
            ids = [new_id() for _ in range(BATCH)]
            now = time.time()
            memories = [
                memory_row(MemoryRecord(i, "ns0", f"content {i}", now, last_accessed=now))
                for i in ids
            ]
            links = [
                _row(
                    [
                        keys[(fold * LINKS_PER_BATCH + j) % len(keys)],
                        ids[j % BATCH],
                        1.0,
                        False,
                        False,
                    ],
                    len(types["links"]),
                )
                for j in range(LINKS_PER_BATCH)
            ]
            events = [
                _row([seq + k + 1, "upsert", ids[k], "ns0", now], len(types["events"]))
                for k in range(BATCH)
            ]
            seq += BATCH
            run("BEGIN", "BEGIN TRANSACTION", [])
            rows_of: dict[str, list[Any]] = {"memories": memories, "links": links, "events": events}
            for table, rows in rows_of.items():
                columns = [list(column) for column in zip(*rows, strict=True)]
                run(f"INSERT {table}", _unnest_insert(table, types[table]), columns)
            for memory_id in touched[fold * UPDATES_PER_FOLD : (fold + 1) * UPDATES_PER_FOLD]:
                run(
                    "UPDATE memories",
                    "UPDATE memories SET access_count = access_count + 1 WHERE id = ?",
                    [memory_id],
                )
            run("COMMIT", "COMMIT", [])
            if fold == folds // 2:
                run("checkpoint", "CHECKPOINT", [])
        conn.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    per_memory = {
        kind: round(seconds / (folds * BATCH) * 1000, 4)
        for kind, seconds in cpu_s.items()
        if kind not in ("checkpoint", "UPDATE memories")
    }
    return {
        "variant": variant,
        "store": str(store),
        "cpu_ms_per_memory": per_memory,
        "checkpoint_ms": round(cpu_s["checkpoint"] * 1000, 1),
        "point_update_ms": round(cpu_s["UPDATE memories"] / (folds * UPDATES_PER_FOLD) * 1000, 3),
        "load_average": round(os.getloadavg()[0], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="a graph file (copied)")
    parser.add_argument("--folds", type=int, default=20)
    parser.add_argument("--variant", choices=("random", "ordered", "no-key"), default="random")
    args = parser.parse_args()
    print(json.dumps(measure(args.store, args.folds, args.variant)), flush=True)


if __name__ == "__main__":
    main()
