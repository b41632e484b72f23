"""The exact-dedup table at start: built on a thread, so the graph serves while it is made.

Hashing every active memory's normalised text costs a Unicode normalisation per memory (8.7 s
of CPU at 1M memories). Built inside the load it kept ``keymem up`` waiting; built lazily on
the serving loop it held the first write, and every request behind it, past that write's
deadline (docs/SCALING.md). Only writes read the table, so it is built on a thread from the
memories active at load, and the first write to need it joins the build: it sees the very
table a build at load would have made (the fields read, id, namespace and content, never
change on a record; which memories were active is fixed when the build starts), and reads never
wait for it.
"""

from __future__ import annotations

import threading
from collections import defaultdict

from keymem.services.graph.text import normalize_content
from keymem.store.records import MemoryRecord

# namespace -> hash of the normalised content -> the memory holding that text
DedupTable = dict[str, dict[int, str]]


def index_text(table: DedupTable, memory: MemoryRecord) -> None:
    """Make ``memory`` the dedup target for its text (unless another is)."""
    table[memory.namespace].setdefault(hash(normalize_content(memory.content)), memory.id)


class DedupBuild:
    """The table over ``active`` (in their order: the first holder of a text is its target),
    made on a daemon thread; ``table()`` waits for it."""

    def __init__(self, active: list[MemoryRecord]) -> None:
        self._table: DedupTable = defaultdict(dict)
        self._active: list[MemoryRecord] | None = active
        self._failed = False
        self._thread: threading.Thread | None = None
        if active:
            self._thread = threading.Thread(target=self._build, name="graph-dedup", daemon=True)
            self._thread.start()

    def _build(self) -> None:
        assert self._active is not None
        try:
            for memory in self._active:
                index_text(self._table, memory)
        except BaseException:  # MemoryError and the like: the joining thread builds it again
            self._failed = True
            raise
        self._active = None  # the list of a million records goes as soon as it is done

    def table(self) -> DedupTable:
        """The whole table, once the build is done (at once after that)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            if self._failed:
                self._table = defaultdict(dict)
                self._failed = False
                self._build()
        return self._table
