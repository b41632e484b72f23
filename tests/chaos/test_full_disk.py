"""A full disk: writes fail with ``unavailable: disk full`` and what to do, nothing changes,
reads keep working (before and after a restart on the still-full disk), and once space is
back the writes go through with nothing lost.

The disk is a small tmpfs mounted for the test (skipped where mounting is not permitted).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from keymem.protocol.errors import Unavailable
from tests.graph_helpers import open_graph
from tests.vectors import remember_body

DISK_SIZE = "8m"
FILL_CHUNK_BYTES = 64 * 1024
MEMORIES = 12

# Writes memories and dies without closing the graph (as kill -9 would): the last commits are
# only in the write-ahead log, which the next start must read on a full disk.
WRITER = """
import os, sys
from pathlib import Path
from tests.graph_helpers import open_graph
from tests.vectors import remember_body
graph = open_graph(Path(sys.argv[1]))
for i in range(int(sys.argv[2])):
    graph.remember(remember_body(f"zebra fact number {i}", ["zebra", f"fact{i:02d}"]))
os._exit(0)
"""


@pytest.fixture
def small_disk() -> Iterator[Path]:
    mount_point = Path(tempfile.mkdtemp(prefix="km-disk-", dir="/tmp"))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(mount_point)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        mount_point.rmdir()
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)
        mount_point.rmdir()


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb") as out:
        try:
            while True:
                out.write(b"\0" * FILL_CHUNK_BYTES)
                out.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_refuses_writes_clearly_and_keeps_every_read(small_disk: Path) -> None:
    home = small_disk / "home"
    home.mkdir()
    subprocess.run(
        [sys.executable, "-c", WRITER, str(home), str(MEMORIES)],
        check=True,
        cwd=Path(__file__).parent.parent.parent,
    )
    filler = _fill(small_disk)

    graph = open_graph(home)  # a restart on the full disk, replaying the log
    ids = sorted(graph.state.memories)
    assert len(ids) == MEMORIES
    with pytest.raises(Unavailable, match="disk full: this write was not saved") as refused:
        graph.remember(remember_body("lions sleep all day", ["lion"]))
    assert str(home) in refused.value.message and not refused.value.detail.get("transient")
    assert sorted(graph.state.memories) == ids  # nothing changed
    for memory_id in ids:
        assert graph.read_memory({"memory_id": memory_id})["memory"]["id"] == memory_id
    assert graph.match_keys({"text": "zebra"})["keys"]
    assert len(graph.get_memories({"ids": ids})["memories"]) == MEMORIES

    filler.unlink()
    saved = graph.remember(remember_body("lions sleep all day", ["lion"]))["saved"]
    graph.close()
    reopened = open_graph(home)
    assert sorted(reopened.state.memories) == sorted([*ids, saved])
    reopened.close()
