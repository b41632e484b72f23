"""The graph's durable store: one DuckDB file owned by the graph service (invariant 1).

Everything here runs inside the graph service's process (or, for offline backup/export/import,
in a CLI process when no service holds the file). The in-memory graph is rebuilt from these
tables at start; the tables are the truth, the memory is a cache that answers reads.
"""

from __future__ import annotations

from keymem.store.database import GraphStore, StoreLocked
from keymem.store.records import KeyAlias, KeyRecord, LinkRecord, MemoryRecord

__all__ = ["GraphStore", "KeyAlias", "KeyRecord", "LinkRecord", "MemoryRecord", "StoreLocked"]
