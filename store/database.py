"""The DuckDB file behind the graph: open, migrate, load everything, commit units of work.

One connection, used only from the graph service's serving thread. Writes arrive as
``Changes`` and are written with multi-row VALUES statements (DuckDB pays per statement and per
commit, not per row), inside one transaction together with their change-feed events.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import itertools
import logging
import math
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import duckdb
import numpy as np

from keymem.protocol.errors import Unavailable
from keymem.store.changes import Changes
from keymem.store.records import (
    AliasCandidate,
    KeyAlias,
    KeyRecord,
    LinkColumns,
    MemoryRecord,
    Outcome,
    shared_column,
)
from keymem.store.schema import damaged_meta, migrate
from keymem.store.writelog import APPLIED_META, Record, WriteLog, log_path

log = logging.getLogger("keymem.store")

GRAPH_FILE_NAME = "graph.duckdb"
DUCKDB_MEMORY_LIMIT = "256MB"
# Lowered to this for a moment after the load, which makes DuckDB drop its cached blocks.
DUCKDB_RELEASE_LIMIT = "1MB"
# Inserts with up to this many cells use a VALUES list, larger ones column lists (unnest).
VALUES_MAX_PARAMS = 200
# Up to this many rows an UPDATE runs per row through the primary-key index; more rows join.
POINT_UPDATE_MAX_ROWS = 2
# The load reads key vectors this many rows at a time into their namespaces' matrices: read
# whole, every vector would be a bytes object and then a joined copy (0.7 GB each at 1M keys,
# fresh pages the start faults in: docs/history/graph-start-2026-12-04.md); one batch's objects
# are memory the next reuses.
KEY_VECTORS_PER_FETCH = 8192
# A namespace's loaded key matrix has this many rows per key, the rest room its index grows
# into in place (``np.zeros``: rows never written are never backed by memory).
KEY_MATRIX_ROOM = 2

# Tables of memory-pair flags and the MemoryRecord list each loads into.
FLAG_TABLES = (("contradictions", "contradicts"), ("near_duplicates", "near_duplicates"))
# In MemoryRecord's field order: a row of them and the row's position construct one.
MEMORY_COLUMNS = (
    ("id", "VARCHAR"),
    ("namespace", "VARCHAR"),
    ("content", "VARCHAR"),
    ("created_at", "DOUBLE"),
    ("source", "VARCHAR"),
    ("supersedes", "VARCHAR"),
    ("superseded_by", "VARCHAR"),
    ("depth", "DOUBLE"),
    ("access_count", "INTEGER"),
    ("last_accessed", "DOUBLE"),
    ("expires_at", "DOUBLE"),
    ("last_confirmed_at", "DOUBLE"),
    ("confirmation_count", "INTEGER"),
    ("decay_profile", "VARCHAR"),
    ("last_confirmation_evidence", "VARCHAR"),
    ("last_confirmation_source", "VARCHAR"),
    ("last_confirmation_id", "VARCHAR"),
)
# Columns whose values are mostly distinct; the others load with equal values shared.
UNIQUE_MEMORY_COLUMNS = frozenset({"id", "content", "created_at", "last_confirmed_at"})


class StoreLocked(Unavailable):
    """Another process holds the graph file (DuckDB allows one opener)."""


# The meta rows that hold numbers, each with the kind it must read as (an empty value is 0).
NUMERIC_META: dict[str, type[int] | type[float]] = {
    "dim": int,
    "pruned_through": int,
    APPLIED_META: int,
    "created_at": float,
    "slept_at": float,
}


def checked_meta(meta: dict[str, str], where: str) -> dict[str, str]:
    """``meta`` as read, once every numeric row reads as a finite number of at least 0;
    ``DamagedMeta`` naming the first that does not."""
    for name, kind in NUMERIC_META.items():
        value = meta.get(name, "")
        try:
            sound = not value or (math.isfinite(number := kind(value)) and number >= 0)
        except ValueError:
            sound = False
        if not sound:
            raise damaged_meta(name, value, where)
    return meta


def read_meta(conn: duckdb.DuckDBPyConnection) -> dict[str, str]:
    return {str(n): str(v) for n, v in conn.execute("SELECT name, value FROM meta").fetchall()}


def meta_number(meta: dict[str, str], name: str) -> int:
    """A whole-number meta row of a checked ``meta``; 0 when missing or empty."""
    return int(meta.get(name) or 0)


def graph_path(home: Path) -> Path:
    return home / GRAPH_FILE_NAME


# How the operating system says a write found no room, as DuckDB passes it on.
_NO_SPACE = (
    "No space left on device",
    "Disk quota exceeded",
    "not enough space",
)


def disk_full(exc: BaseException) -> bool:
    """Whether a failed write failed for lack of disk space (or quota)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return any(text in str(exc) for text in _NO_SPACE)


def effective_links(extra_columns: str = "") -> str:
    """Links with their latest weight (appended changes not yet folded in win)."""
    return (
        "SELECT l.key_id, l.memory_id, coalesce(w.weight, l.weight) AS weight, l.auto, "
        f"l.learned{extra_columns} "
        "FROM links l LEFT JOIN (SELECT key_id, memory_id, arg_max(weight, serial) AS weight "
        "FROM link_weights GROUP BY key_id, memory_id) w "
        "ON l.key_id = w.key_id AND l.memory_id = w.memory_id"
    )


EFFECTIVE_LINKS = effective_links()
# Effective links with the DuckDB row of each end (NULL: no such key or memory), whether both
# ends are in one namespace, the id a link names only where its end is missing, and its own
# row (the order it was written in). Unordered: the load sorts the rows it has made of the
# ends (DuckDB's sort by memory id cost 2.4 s of CPU more at 1M memories than no sort).
LINKS_WITH_ENDS = (
    "SELECT k.rowid AS key_row, m.rowid AS memory_row, l.weight, l.auto, l.learned, "
    "k.namespace = m.namespace AS same_namespace, "
    "CASE WHEN k.rowid IS NULL THEN l.key_id END AS lost_key, "
    "CASE WHEN m.rowid IS NULL THEN l.memory_id END AS lost_memory, l.link_row "
    f"FROM ({effective_links(', l.rowid AS link_row')}) l LEFT JOIN keys k ON k.id = l.key_id "
    "LEFT JOIN memories m ON m.id = l.memory_id"
)
# An event row: seq, op, memory_id, namespace, committed_at, then the outcome of the keyed write
# it carries (outcome_key, outcome_method, outcome_result; NULL when it carries none).
EVENT_WIDTH = 8
# Every committed outcome of a keyed write, wherever it is kept (see schema v7).
OUTCOMES = (
    "SELECT key, method, result, committed_at FROM write_outcomes UNION ALL "
    "SELECT outcome_key, outcome_method, outcome_result, committed_at FROM events "
    "WHERE outcome_key IS NOT NULL"
)
# Row ids up to this many times a table's rows are looked up through a dense table of positions.
DENSE_ROW_IDS_MAX_FACTOR = 4
# Fold appended weight changes into ``links`` once this many are waiting (and the service idles).
FOLD_LINK_WEIGHTS_MIN_ROWS = 1_000


def memory_row(m: MemoryRecord) -> tuple[Any, ...]:
    return (
        m.id,
        m.namespace,
        m.content,
        m.created_at,
        m.source,
        m.supersedes,
        m.superseded_by,
        m.depth,
        m.access_count,
        m.last_accessed,
        m.expires_at,
        m.last_confirmed_at,
        m.confirmation_count,
        m.decay_profile,
        m.last_confirmation_evidence,
        m.last_confirmation_source,
        m.last_confirmation_id,
    )


def vector_bytes(vector: np.ndarray) -> bytes:
    return np.ascontiguousarray(vector, dtype="<f4").tobytes()


class MemoryCodes(NamedTuple):
    """One namespace's loaded memory codes: the memories' positions among the loaded rows,
    and their codes, one row each (one buffer, not a row at a time)."""

    positions: np.ndarray
    codes: np.ndarray


def code_bytes(dim: int) -> int:
    """Bytes of one memory's code: the signs of a ``dim``-d vector in 64-bit words
    (services/graph/memory_vectors.py; 64 at 512-d)."""
    return 8 * -(-dim // 64)


# Active memories' codes made by the recorded embedder, grouped by namespace, oldest first.
MEMORY_CODES = (
    "SELECT m.rowid AS memory_row, dense_rank() OVER (ORDER BY m.namespace) AS space, v.code "
    "FROM memory_vectors v JOIN memories m ON m.id = v.memory_id "
    "WHERE v.fingerprint = ? AND m.superseded_by IS NULL ORDER BY space, m.created_at, m.id"
)
# Active memories with no code of the recorded embedder, oldest first.
UNVECTORISED = (
    "SELECT m.rowid AS memory_row FROM memories m WHERE m.superseded_by IS NULL AND NOT EXISTS "
    "(SELECT 1 FROM memory_vectors v WHERE v.memory_id = m.id AND v.fingerprint = ?) "
    "ORDER BY m.created_at, m.id"
)


@dataclass
class LoadedGraph:
    """The file's rows as the graph starts from them.

    The keys come grouped by namespace. ``key_matrices`` holds, when every vector has the
    graph's dimension, each namespace's matrix: its keys' vectors as its first rows in the
    records' order (the records' vectors are those rows), then room to grow, so the namespace's
    index serves from it without a copy. ``key_columns`` and ``memory_columns`` are the fetched
    columns in the records' order, kept so the start-up quarantine can check whole columns at
    once.
    """

    keys: dict[str, KeyRecord] = field(default_factory=dict)
    memories: dict[str, MemoryRecord] = field(default_factory=dict)
    links: LinkColumns = field(default_factory=LinkColumns.empty)  # sorted by memory
    meta: dict[str, str] = field(default_factory=dict)
    head_seq: int = 0
    first_seq: int = 1
    key_matrices: dict[str, np.ndarray] = field(default_factory=dict)
    key_columns: dict[str, np.ndarray] = field(default_factory=dict)
    memory_columns: dict[str, np.ndarray] = field(default_factory=dict)
    # per link: both ends were in the file, in one namespace
    link_ends_sound: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # the dense leg's codes of active memories, made by the recorded embedder: per namespace
    # group (``MemoryCodes``), and the positions of active memories that have none
    memory_codes: list[MemoryCodes] = field(default_factory=list)
    unvectorised: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


class TableRows(NamedTuple):
    """A loaded table's DuckDB row ids and, in the same order, its id column."""

    rows: np.ndarray
    ids: np.ndarray

    def positions(self, wanted: np.ndarray) -> np.ndarray:
        """The positions among the loaded rows of DuckDB row ids that are among them."""
        top = int(self.rows.max(initial=-1))
        if top < DENSE_ROW_IDS_MAX_FACTOR * (len(self.rows) + 1):
            # row id -> position, then one lookup per joined row (a sorted search per row
            # took 2.6 s of CPU for the 4.5M links of 1M memories, this 0.1 s)
            position = np.full(top + 1, -1, dtype=np.int64)
            position[self.rows] = np.arange(len(self.rows))
            found: np.ndarray = position[wanted]
            return found
        # rows of an uncommitted transaction have ids near 2**62 (a full disk's load)
        order = np.argsort(self.rows)
        return order[np.searchsorted(self.rows, wanted, sorter=order)]

    def locate(self, rows: np.ndarray, lost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per joined row: its position among the loaded rows (-1 where the join found none,
        NULL) and its id, the loaded record's own string (a link then adds no string) or,
        where there is no row, the id the link names (``lost``)."""
        found = ~np.ma.getmaskarray(rows)
        if found.all():  # nothing lost (a sound file): no column of lost ids to merge into
            everywhere = self.positions(np.ma.getdata(rows))
            return everywhere, self.ids[everywhere]
        at = self.positions(np.ma.getdata(rows)[found])
        positions = np.full(len(found), -1, dtype=np.int64)
        positions[found] = at
        column = np.array(np.ma.getdata(lost), dtype=object)
        column[found] = self.ids[at]
        return positions, column


def trim_heap() -> None:
    """Give the C heap's free pages back to the system (glibc only; elsewhere nothing)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


class GraphStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.conn = duckdb.connect(str(path))
        except duckdb.IOException as exc:
            raise StoreLocked(f"cannot open {path}: {exc}") from exc
        self.closed = False
        # A failed open lets go of the file: DuckDB admits one read-write opener, and a held
        # connection would refuse every later open of this process and of any other.
        with contextlib.ExitStack() as undo:
            undo.callback(self.conn.close)
            self._open(undo)
            undo.pop_all()

    def _open(self, undo: contextlib.ExitStack) -> None:
        """Configure and migrate the file, then fold in what its write-ahead log holds
        (``undo`` closes what this opens if a later step fails)."""
        # DuckDB caches table data up to its memory limit (80% of RAM by default); the graph
        # keeps its own copy in Python, so the cache only needs to serve writes and backups.
        self.conn.execute(f"SET memory_limit = '{DUCKDB_MEMORY_LIMIT}'")
        # DuckDB draws a progress bar on stdout for a query past 2 s (a large store's load on a
        # busy box): it would corrupt a command's --json output.
        self.conn.execute("SET enable_progress_bar = false")
        self._types: dict[str, list[str]] = {}
        # transactions committed since the last checkpoint: each costs a restart its replay
        self.commits_since_checkpoint = 0
        self.migrated_from = migrate(self.conn)
        self.serial = int(
            self.conn.execute("SELECT coalesce(max(serial), 0) FROM link_weights").fetchall()[0][0]
        )
        # the graph's write-ahead log (store/writelog.py): written records not yet in DuckDB
        self.pending: list[Record] = []
        # a seq DuckDB's events table is known to hold no event after (None: not known), so a
        # feed reader asking from there on is served from the logged records alone
        self.events_through: int | None = None
        meta = self.read_meta()
        if "epoch" not in meta:
            self.set_meta({"epoch": uuid.uuid4().hex, "created_at": str(time.time())})
            meta = self.read_meta()
        self.log = WriteLog(log_path(self.path), meta["epoch"])
        undo.callback(self.log.close)
        self.pending = self.log.read(meta_number(meta, APPLIED_META))
        self._fold_logged()

    def _fold_logged(self) -> bool:
        """Fold the logged writes into DuckDB; False when the disk has no room for them (they
        stay logged, durable, for a later fold)."""
        try:
            self.flush()
        except (duckdb.Error, OSError) as exc:
            if not disk_full(exc):
                raise
            log.warning(
                "%d logged writes stay in %s until the disk has room for them",
                len(self.pending),
                self.log.path,
            )
            return False
        return True

    # -- meta ------------------------------------------------------------------------------
    def read_meta(self) -> dict[str, str]:
        """The meta rows, ``DamagedMeta`` when a numeric one is not a number."""
        return checked_meta(read_meta(self.conn), str(self.path))

    def set_meta(self, values: dict[str, str]) -> None:
        changes = Changes()
        changes.meta.update(values)
        self.commit(changes, head_seq=0)

    # -- load ------------------------------------------------------------------------------
    def load(self) -> LoadedGraph:
        """Every row of the graph as records, links as columns (see ``LoadedGraph``).

        Equal values share one object (ids in links are the records' own strings, a namespace
        or a profile is one string), and DuckDB's block cache and the allocator's freed pages
        are handed back at the end: the load reads the whole file once, then the graph serves
        from its own copy.
        """
        if not self._fold_logged():
            # No room to fold the logged writes in: read the file as they would leave it,
            # inside a transaction that is then rolled back; they stay logged.
            self.conn.execute("BEGIN TRANSACTION")
            try:
                self._fold(self.pending)
                return self._read_all()
            finally:
                self.conn.execute("ROLLBACK")
        self._drop_unloadable_codes()
        return self._read_all()

    def _drop_unloadable_codes(self) -> None:
        """Delete the memory codes a load would leave out: another embedder's, or damaged.
        Their memories wait in the backlog, and a memory waiting for its code then has no row,
        so a fold inserts each new code without a delete by id first (memory_vectors has no
        index: such a delete scans the table, ~40 ms of CPU a fold at 1M whatever the ids)."""
        meta = self.read_meta()
        width = code_bytes(meta_number(meta, "dim"))
        with self.transaction():
            self.conn.execute(
                "DELETE FROM memory_vectors "
                "WHERE fingerprint IS DISTINCT FROM ? OR octet_length(code) <> ?",
                [meta.get("fingerprint") or None, width],
            )

    def _read_all(self) -> LoadedGraph:
        graph = LoadedGraph(meta=self.read_meta())
        memories = self._load_memories(graph)
        self._load_links(graph, self._load_keys(graph), memories)
        self._load_memory_codes(graph, memories)
        lo, hi = self.conn.execute("SELECT min(seq), max(seq) FROM events").fetchall()[0]
        pruned_through = meta_number(graph.meta, "pruned_through")
        graph.head_seq = int(hi) if hi is not None else pruned_through
        graph.first_seq = int(lo) if lo is not None else pruned_through + 1
        self.release_cache()
        return graph

    def _load_keys(self, graph: LoadedGraph) -> TableRows:
        cols = self.conn.execute(
            "SELECT rowid, id, namespace, concept, key_type, created_at FROM keys "
            "ORDER BY namespace, rowid"
        ).fetchnumpy()
        rows = TableRows(cols["rowid"], cols["id"])
        if len(rows.ids):
            namespaces = shared_column(cols["namespace"])
            vectors = self._key_vectors(graph, rows, namespaces)
            graph.key_columns = {
                "id": cols["id"],
                "created_at": cols["created_at"],
                "key_type": cols["key_type"],
            }
            for row, (key_id, namespace, concept, key_type, created_at, vector) in enumerate(
                zip(
                    cols["id"].tolist(),
                    namespaces,
                    cols["concept"].tolist(),
                    shared_column(cols["key_type"]),
                    cols["created_at"].tolist(),
                    vectors,
                    strict=True,
                )
            ):
                graph.keys[key_id] = KeyRecord(
                    key_id, namespace, concept, key_type, created_at, vector, row
                )
        for key_id, alias, learned, added_at, hits, last_hit in self.conn.execute(
            "SELECT key_id, alias, learned, added_at, hits, last_hit_at FROM key_aliases"
        ).fetchall():
            key = graph.keys.get(key_id)
            if key is not None:
                key.aliases.append(KeyAlias(alias, bool(learned), added_at, hits, last_hit))
        for key_id, query_norm, query, count, last_seen in self.conn.execute(
            "SELECT key_id, query_norm, query, count, last_seen FROM alias_candidates"
        ).fetchall():
            key = graph.keys.get(key_id)
            if key is not None:
                key.candidates[query_norm] = AliasCandidate(query, count, last_seen)
        return rows

    def _key_vectors(
        self, graph: LoadedGraph, rows: TableRows, namespaces: list[str]
    ) -> list[np.ndarray]:
        """Each loaded key's float32 vector, in the records' order: rows of its namespace's
        matrix (``graph.key_matrices``), read ``KEY_VECTORS_PER_FETCH`` at a time. A blob of
        another size (a damaged file) is an array of its own, and then no matrix is kept, so
        the quarantine checks every key one by one and names the bad ones."""
        starts = [0, *(i for i in range(1, len(namespaces)) if namespaces[i] != namespaces[i - 1])]
        counts = np.diff([*starts, len(namespaces)])
        width = meta_number(graph.meta, "dim") or self._first_vector_floats()
        matrices = [np.zeros((KEY_MATRIX_ROOM * n, width), dtype=np.float32) for n in counts]
        odd: dict[int, np.ndarray] = {}
        cursor = self.conn.execute("SELECT rowid, vector FROM keys")
        read = 0
        while batch := cursor.fetchmany(KEY_VECTORS_PER_FETCH):
            rowids, blobs = zip(*batch, strict=True)
            at = rows.positions(np.asarray(rowids, dtype=np.int64))
            sized = [len(blob) == 4 * width for blob in blobs]
            if not all(sized):
                for position, blob, fits in zip(at.tolist(), blobs, sized, strict=True):
                    if not fits:
                        odd[position] = np.frombuffer(blob[: len(blob) - len(blob) % 4], "<f4")
                at, blobs = at[np.array(sized)], tuple(itertools.compress(blobs, sized))
            part = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(at), width)
            group = np.searchsorted(starts, at, side="right") - 1
            for g in np.unique(group).tolist():
                chosen = group == g
                matrices[g][at[chosen] - starts[g]] = part[chosen]
            read += len(batch)
        if read != len(rows.ids):
            raise RuntimeError("the keys table changed between two reads of the load")
        vectors: list[np.ndarray] = []
        for g, (start, count) in enumerate(zip(starts, counts.tolist(), strict=True)):
            vectors.extend(odd.get(start + i, matrices[g][i]) for i in range(count))
        if not odd:
            graph.key_matrices = dict(zip((namespaces[s] for s in starts), matrices, strict=True))
        return vectors

    def _first_vector_floats(self) -> int:
        """A file that never recorded its dimension: its first key vector's."""
        (size,) = self.conn.execute("SELECT octet_length(vector) FROM keys LIMIT 1").fetchall()[0]
        return int(size) // 4

    def _load_memories(self, graph: LoadedGraph) -> TableRows:
        names = ", ".join(name for name, _ in MEMORY_COLUMNS)
        columns = self.conn.execute(f"SELECT rowid, {names} FROM memories").fetchnumpy()
        rows = TableRows(columns.pop("rowid"), columns["id"])
        graph.memory_columns = columns
        lists = [
            columns[name].tolist()
            if name in UNIQUE_MEMORY_COLUMNS
            else shared_column(columns[name])
            for name, _ in MEMORY_COLUMNS
        ]
        lists.append(list(range(len(rows.ids))))  # each record's row
        memories = graph.memories
        for row in zip(*lists, strict=True):
            memories[row[0]] = MemoryRecord(*row)
        pointers = (
            ("related_to", "SELECT memory_id, related_id FROM related ORDER BY memory_id, pos"),
            *(
                (attribute, f"SELECT memory_id, other_id FROM {table}")
                for table, attribute in FLAG_TABLES
            ),
        )
        for attribute, query in pointers:
            grouped: dict[str, list[str]] = defaultdict(list)
            for memory_id, other_id in self.conn.execute(query).fetchall():
                grouped[memory_id].append(other_id)
            for memory_id, others in grouped.items():
                if memory_id in memories:
                    setattr(memories[memory_id], attribute, tuple(others))
        return rows

    def _load_links(self, graph: LoadedGraph, keys: TableRows, memories: TableRows) -> None:
        """Links with their ends as rows of the loaded keys and memories (DuckDB joins, so no
        id string is made per link), grouped by memory so the service reads a memory's links
        as one slice, each memory's in the order they were written (its writer's key order,
        which its ``about`` keeps). The memories in the order of their rows, the order they
        were written in: a key's equally weighted links rank oldest memory first, as in the
        live graph, where newer links rank after the loaded ones. A link whose memory is
        missing has no row and is quarantined, so those are left in one group."""
        links = self.conn.execute(LINKS_WITH_ENDS).fetchnumpy()
        key_row, key_id = keys.locate(links["key_row"], links["lost_key"])
        memory_row, memory_id = memories.locate(links["memory_row"], links["lost_memory"])
        order = np.lexsort((links["link_row"], memory_row))
        graph.links = LinkColumns(
            key_id=key_id,
            memory_id=memory_id,
            weight=np.asarray(links["weight"], dtype=np.float64),
            auto=np.asarray(links["auto"], dtype=bool),
            learned=np.asarray(links["learned"], dtype=bool),
            key_row=key_row,
            memory_row=memory_row,
        ).take(order)
        graph.link_ends_sound = np.ma.filled(links["same_namespace"], False).astype(bool)[order]

    def _load_memory_codes(self, graph: LoadedGraph, memories: TableRows) -> None:
        """The codes of active memories made by the recorded embedder, one buffer per
        namespace, and which active memories have none (a file without a recorded embedder
        has none; a damaged code counts as none, so its memory is vectorised again)."""
        fingerprint = graph.meta.get("fingerprint") or None
        width = code_bytes(meta_number(graph.meta, "dim"))
        cols = self.conn.execute(MEMORY_CODES, [fingerprint]).fetchnumpy()
        rows, blobs = np.asarray(cols["memory_row"]), cols["code"]
        whole = np.fromiter((len(blob) == width for blob in blobs), bool, len(blobs))
        if not whole.all():
            log.warning("%d memory codes of the wrong size left out", int((~whole).sum()))
        if whole.any():
            positions = memories.positions(rows[whole])
            codes = np.frombuffer(b"".join(blobs[whole]), dtype=np.uint8).reshape(-1, width)
            space = np.asarray(cols["space"])[whole]
            starts = [0, *(np.flatnonzero(np.diff(space)) + 1).tolist(), len(space)]
            graph.memory_codes = [
                MemoryCodes(positions[a:b], codes[a:b]) for a, b in itertools.pairwise(starts)
            ]
        missing = self.conn.execute(UNVECTORISED, [fingerprint]).fetchnumpy()["memory_row"]
        # a damaged row beside a whole one (a load that could not drop it: a full disk) is moot;
        # asked only when a row is damaged (the set difference sorts every row: 0.8 s at 1M)
        damaged = rows[:0] if whole.all() else np.setdiff1d(rows[~whole], rows[whole])
        graph.unvectorised = memories.positions(np.concatenate([missing, damaged]))

    def release_cache(self) -> None:
        """Drop DuckDB's cached table blocks and return freed heap pages to the system.

        After a full read the cache holds most of the file (~85 MB at 100k memories) and the
        C heap the query's transient buffers: neither serves the graph, which keeps its own
        copy. Writes read the blocks they need again.
        """
        try:
            self.conn.execute(f"SET memory_limit = '{DUCKDB_RELEASE_LIMIT}'")
            self.conn.execute(f"SET memory_limit = '{DUCKDB_MEMORY_LIMIT}'")
        except duckdb.Error:
            log.debug("DuckDB kept its cache", exc_info=True)
        trim_heap()

    # -- writes ----------------------------------------------------------------------------
    def append(self, changes: Changes, head_seq: int) -> int:
        """Make ``changes`` durable in the write-ahead log (one append and ``fdatasync``) and
        leave them for ``flush`` to fold into DuckDB; returns the feed head after them."""
        self.pending.append(self.log.append(head_seq, changes))
        return head_seq + len(changes.events)

    def pending_bytes(self) -> int:
        return self.log.size

    def flush(self) -> int:
        """Fold every logged write into DuckDB in one transaction, then empty the log;
        returns how many writes. On failure (a full disk) they all stay logged."""
        if not self.pending:
            return 0
        with self.transaction():
            self._fold(self.pending)
        folded = len(self.pending)
        self.pending.clear()
        self.log.reset()
        return folded

    def _fold(self, records: Sequence[Record]) -> None:
        """Write ``records`` as one set of rows, inside the caller's transaction."""
        merged = records[0].changes()
        for record in records[1:]:
            merged.absorb(record.changes())
        merged.meta[APPLIED_META] = str(records[-1].lsn)
        self._commit_rows(merged, records[0].head_seq)

    def commit(self, changes: Changes, head_seq: int) -> int:
        """Write ``changes`` in one transaction (after any logged writes, which go first);
        returns the feed head after the commit.

        Keyed writes' outcomes ride on the event rows, one each, in order (any event row of the
        transaction will do: the outcome only has to commit with its write); outcomes beyond
        the events go to ``write_outcomes``.
        """
        self.flush()
        with self.transaction():
            return self._commit_rows(changes, head_seq)

    def _commit_rows(self, changes: Changes, head_seq: int) -> int:
        now = time.time()
        outcomes: list[tuple[str | None, str | None, bytes | None]] = [
            (key, o.method, o.result) for key, o in changes.outcomes.items()
        ]
        riding = outcomes[: len(changes.events)]
        riding += [(None, None, None)] * (len(changes.events) - len(riding))
        try:
            self._write(changes)
            seq = head_seq
            event_rows = []
            for (op, memory_id, namespace), outcome in zip(changes.events, riding, strict=True):
                seq += 1
                event_rows.append((seq, op, memory_id, namespace, now, *outcome))
            self.insert_rows("events", EVENT_WIDTH, event_rows)
            self.insert_rows(
                "write_outcomes",
                4,
                [
                    (key, method, result, now)
                    for key, method, result in outcomes[len(changes.events) :]
                ],
            )
        except duckdb.OutOfMemoryException:
            log.error("DuckDB's memory pool is full: %s", self.pool_mb())
            raise
        return seq

    def pool_mb(self) -> dict[str, float]:
        """What holds DuckDB's buffer pool, by DuckDB's tag (MB in memory): the names a full
        pool's log line needs to tell table blocks from indexes."""
        return {
            str(tag): round(used / 2**20, 1)
            for tag, used in self.conn.execute(
                "SELECT tag, memory_usage_bytes FROM duckdb_memory() WHERE memory_usage_bytes > 0"
            ).fetchall()
        }

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """BEGIN ... COMMIT, rolled back on any error, which is the one raised: a COMMIT that
        failed (a full disk) has already ended the transaction, and the ROLLBACK's own error
        ("no transaction is active") would hide why."""
        self.conn.execute("BEGIN TRANSACTION")
        try:
            yield
            self.conn.execute("COMMIT")
            self.commits_since_checkpoint += 1
        except BaseException:
            try:
                self.conn.execute("ROLLBACK")
            except duckdb.Error:
                pass
            raise

    def _write(self, c: Changes) -> None:
        if c.deleted_memories:
            ids = sorted(c.deleted_memories)
            for table, column in (
                ("memories", "id"),
                ("links", "memory_id"),
                ("link_weights", "memory_id"),
                ("related", "memory_id"),
                ("memory_vectors", "memory_id"),
                *((table, "memory_id") for table, _ in FLAG_TABLES),
            ):
                self._delete_in(table, column, ids)
        if c.deleted_keys:
            ids = sorted(c.deleted_keys)
            for table, column in (
                ("keys", "id"),
                ("key_aliases", "key_id"),
                ("alias_candidates", "key_id"),
                ("links", "key_id"),
                ("link_weights", "key_id"),
            ):
                self._delete_in(table, column, ids)
        self.insert_rows(
            "keys",
            6,
            [
                (k.id, k.namespace, k.concept, k.key_type, k.created_at, vector_bytes(k.vector))
                for k in c.new_keys.values()
            ],
        )
        self._update(
            "keys",
            ("id",),
            (("id", "VARCHAR"), ("concept", "VARCHAR"), ("key_type", "VARCHAR")),
            [(k.id, k.concept, k.key_type) for k in c.touched_keys.values()],
        )
        if c.alias_keys:
            self._delete_in("key_aliases", "key_id", sorted(c.alias_keys))
            self.insert_rows(
                "key_aliases",
                6,
                [
                    (k.id, a.alias, a.learned, a.added_at, a.hits, a.last_hit_at)
                    for k in c.alias_keys.values()
                    for a in k.aliases
                ],
            )
        if c.candidate_keys:
            self._delete_in("alias_candidates", "key_id", sorted(c.candidate_keys))
            self.insert_rows(
                "alias_candidates",
                5,
                [
                    (k.id, norm, cand.query, cand.count, cand.last_seen)
                    for k in c.candidate_keys.values()
                    for norm, cand in k.candidates.items()
                ],
            )
        self.insert_rows(
            "memories", len(MEMORY_COLUMNS), [memory_row(m) for m in c.new_memories.values()]
        )
        self._update(
            "memories",
            ("id",),
            MEMORY_COLUMNS,
            [memory_row(m) for m in c.touched_memories.values()],
        )
        self.insert_rows(
            "links",
            5,
            [
                (ln.key_id, ln.memory_id, ln.weight, ln.auto, ln.learned)
                for ln in c.new_links.values()
            ],
        )
        if c.touched_links:
            self.serial += 1
            self.insert_rows(
                "link_weights",
                4,
                [
                    (ln.key_id, ln.memory_id, ln.weight, self.serial)
                    for ln in c.touched_links.values()
                ],
            )
        rewrite_related = sorted(set(c.related_rewrite) - set(c.new_memories))
        if rewrite_related:
            self._delete_in("related", "memory_id", rewrite_related)
        self.insert_rows(
            "related",
            3,
            [
                (m.id, rid, pos)
                for m in c.related_rewrite.values()
                for pos, rid in enumerate(m.related_to)
            ],
        )
        rewrite_flags = sorted(set(c.flags_rewrite) - set(c.new_memories))
        for table, attribute in FLAG_TABLES:
            if rewrite_flags:
                self._delete_in(table, "memory_id", rewrite_flags)
            self.insert_rows(
                table,
                2,
                [
                    (m.id, other)
                    for m in c.flags_rewrite.values()
                    for other in getattr(m, attribute)
                ],
            )
        self.insert_rows("confirmations", 5, c.confirmations)
        # A memory gets a code only while it has none in the file (_drop_unloadable_codes).
        self.insert_rows(
            "memory_vectors", 3, [(mid, code, fp) for mid, (code, fp) in c.memory_codes.items()]
        )
        for name, value in c.meta.items():
            # an UPDATE (~0.7 ms of CPU), and an INSERT only for a name not there yet: every
            # fold moves ``log_applied``, and INSERT OR REPLACE cost ~3 ms
            updated = self.conn.execute(
                "UPDATE meta SET value = ? WHERE name = ?", [value, name]
            ).fetchall()
            if not updated[0][0]:
                self.conn.execute("INSERT INTO meta VALUES (?, ?)", [name, value])

    def insert_rows(self, table: str, width: int, rows: Sequence[Sequence[Any]]) -> None:
        """Insert rows with one statement.

        DuckDB pays per statement and per bound parameter. A few rows go as a VALUES list (the
        cheapest for one memory: ~0.6 ms less per statement); more rows travel as one typed
        list parameter per column, ``unnest``ed, about twice as fast at a few hundred rows.
        """
        if not rows:
            return
        if table == "events":
            self.events_through = None
        types = self._column_types(table)
        if len(types) != width:
            raise ValueError(f"{table} has {len(types)} columns, rows have {width}")
        if len(rows) * width <= VALUES_MAX_PARAMS:
            row_marks = "(" + ",".join(["?"] * width) + ")"
            self.conn.execute(
                f"INSERT INTO {table} VALUES {','.join([row_marks] * len(rows))}",
                [value for row in rows for value in row],
            )
            return
        columns = [list(column) for column in zip(*rows, strict=True)]
        selects = ", ".join(f"unnest(?::{kind}[])" for kind in types)
        self.conn.execute(f"INSERT INTO {table} SELECT {selects}", columns)

    def _column_types(self, table: str) -> list[str]:
        cached = self._types.get(table)
        if cached is None:
            cached = [str(row[1]) for row in self.conn.execute(f"DESCRIBE {table}").fetchall()]
            self._types[table] = cached
        return cached

    def _update(
        self,
        table: str,
        key_columns: tuple[str, ...],
        columns: Sequence[tuple[str, str]],
        rows: Sequence[Sequence[Any]],
    ) -> None:
        if not rows:
            return
        names = [name for name, _ in columns]
        if len(rows) <= POINT_UPDATE_MAX_ROWS:
            # an index lookup per row beats a join against a scan of the whole table
            values_at = [i for i, n in enumerate(names) if n not in key_columns]
            keys_at = [names.index(k) for k in key_columns]
            sets = ", ".join(f"{names[i]} = ?" for i in values_at)
            where = " AND ".join(f"{k} = ?" for k in key_columns)
            for row in rows:
                self.conn.execute(
                    f"UPDATE {table} SET {sets} WHERE {where}",
                    [row[i] for i in values_at] + [row[i] for i in keys_at],
                )
            return
        assignments = ", ".join(f"{name} = v.{name}" for name in names if name not in key_columns)
        match = " AND ".join(f"{table}.{k} = v.{k}" for k in key_columns)
        selects = ", ".join(f"unnest(?::{kind}[]) AS {name}" for name, kind in columns)
        values = [list(column) for column in zip(*rows, strict=True)]
        self.conn.execute(
            f"UPDATE {table} SET {assignments} FROM (SELECT {selects}) AS v WHERE {match}",
            values,
        )

    def _delete_in(self, table: str, column: str, ids: Sequence[str]) -> None:
        if ids:
            self.conn.execute(
                f"DELETE FROM {table} WHERE {column} IN (SELECT unnest(?::VARCHAR[]))",
                [list(ids)],
            )

    def fold_link_weights(self, min_rows: int = FOLD_LINK_WEIGHTS_MIN_ROWS) -> int:
        """Apply appended weight changes to ``links`` in one bulk UPDATE; returns rows folded."""
        self.flush()
        waiting = int(self.conn.execute("SELECT count(*) FROM link_weights").fetchall()[0][0])
        if waiting < min_rows or waiting == 0:
            return 0
        with self.transaction():
            self.conn.execute(
                "UPDATE links SET weight = w.weight FROM (SELECT key_id, memory_id, "
                "arg_max(weight, serial) AS weight FROM link_weights GROUP BY key_id, memory_id) w "
                "WHERE links.key_id = w.key_id AND links.memory_id = w.memory_id"
            )
            self.conn.execute("DELETE FROM link_weights")
        return waiting

    # -- idempotent writes -----------------------------------------------------------------
    def load_outcomes(self, since: float) -> dict[str, Outcome]:
        """The outcomes of keyed writes committed at ``since`` or later, from the event rows
        and ``write_outcomes``; a key found twice (reused after its retention) gives its newest.
        Writes still only in the log count too (a start on a full disk leaves them there).
        """
        rows = self.conn.execute(
            f"SELECT key, arg_max(method, committed_at), arg_max(result, committed_at), "
            f"max(committed_at) FROM ({OUTCOMES}) WHERE committed_at >= ? GROUP BY key",
            [since],
        ).fetchall()
        outcomes = {str(k): Outcome(str(m), bytes(r), float(t)) for k, m, r, t in rows}
        for record in self.pending:
            outcomes.update(record.changes().outcomes)
        return outcomes

    def prune_outcomes(self, before: float) -> None:
        """Delete ``write_outcomes`` rows older than ``before`` (those on event rows go with
        the events, and ``load_outcomes`` reads none older than its ``since``)."""
        self.flush()
        self.conn.execute("DELETE FROM write_outcomes WHERE committed_at < ?", [before])

    # -- change feed -----------------------------------------------------------------------
    def events_after(self, seq: int, limit: int) -> list[tuple[int, str, str]]:
        """The feed's events after ``seq``: DuckDB's, then those of writes still only logged
        (numbered on from the feed head each was logged at), so a reader of the feed never
        waits for the write-behind.

        A reader that follows the feed asks again and again from past DuckDB's last event
        while writes wait in the log; the statement cost ~0.8 ms of CPU each time (more at
        1M). So a read that got every row after ``seq`` records that DuckDB holds none after
        the last of them (``events_through``; any insert into the table forgets it), and a
        later read from there on skips the statement."""
        events: list[tuple[int, str, str]] = []
        if self.events_through is None or seq < self.events_through:
            rows = self.conn.execute(
                "SELECT seq, op, memory_id FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
                [seq, limit],
            ).fetchall()
            events = [(int(s), str(op), str(mid)) for s, op, mid in rows]
            if len(events) < limit:
                self.events_through = events[-1][0] if events else seq
        for record in self.pending:
            if len(events) >= limit:
                break
            for position, (op, memory_id, _) in enumerate(record.events, record.head_seq + 1):
                if position > seq and len(events) < limit:
                    events.append((position, op, memory_id))
        return events

    def prune_events(self, keep: int, head_seq: int) -> int:
        """Drop events older than the newest ``keep``; returns the first retained seq."""
        self.flush()
        pruned_through = meta_number(self.read_meta(), "pruned_through")
        cutoff = head_seq - keep
        if cutoff <= pruned_through:
            return pruned_through + 1
        changes = Changes()
        changes.set_meta("pruned_through", cutoff)
        with self.transaction():
            # the outcomes the dropped rows carry stay until the ledger's own pruning
            self.conn.execute(
                "INSERT INTO write_outcomes SELECT outcome_key, outcome_method, outcome_result, "
                "committed_at FROM events WHERE seq <= ? AND outcome_key IS NOT NULL",
                [cutoff],
            )
            self.conn.execute("DELETE FROM events WHERE seq <= ?", [cutoff])
            self._write(changes)
        return cutoff + 1

    # -- vectors ---------------------------------------------------------------------------
    def replace_vectors(
        self, vectors: Iterable[tuple[str, np.ndarray]], meta: dict[str, str]
    ) -> None:
        """Swap every key's vector (an embedding migration) in one transaction."""
        self.flush()
        rows = [(key_id, vector_bytes(v)) for key_id, v in vectors]
        changes = Changes()
        changes.meta.update(meta)
        with self.transaction():
            self._update("keys", ("id",), (("id", "VARCHAR"), ("vector", "BLOB")), rows)
            # memory codes of the old model are not comparable with the new one's queries
            self.conn.execute(
                "DELETE FROM memory_vectors WHERE fingerprint <> ?", [meta["fingerprint"]]
            )
            self._write(changes)

    # -- lifecycle -------------------------------------------------------------------------
    def snapshot_to(self, target: Path, conn: duckdb.DuckDBPyConnection | None = None) -> None:
        """Copy every committed row into a new database file at ``target``.

        The copy gets its own epoch: restored in place of the live file, it is a different
        history, and change-feed subscribers must re-snapshot rather than trust their seq.
        ``conn`` may be a cursor of this database used from another thread (a background
        backup, which flushes the log before it starts); the copy reads one consistent
        snapshot while writes go on.
        """
        if conn is None:
            self.flush()
        conn = conn or self.conn
        source = conn.execute("SELECT current_database()").fetchall()[0][0]
        alias = f"keymem_snapshot_{uuid.uuid4().hex[:8]}"
        conn.execute(f"ATTACH ? AS {alias}", [str(target)])
        try:
            conn.execute(f'COPY FROM DATABASE "{source}" TO {alias}')
            conn.execute(
                f"UPDATE {alias}.meta SET value = ? WHERE name = 'epoch'", [uuid.uuid4().hex]
            )
        finally:
            conn.execute(f"DETACH {alias}")

    def checkpoint(self) -> None:
        self.flush()
        self.conn.execute("CHECKPOINT")
        self.commits_since_checkpoint = 0

    def wal_bytes(self) -> int:
        """The size of the write-ahead log the next open replays (0 when there is none)."""
        try:
            return Path(f"{self.path}.wal").stat().st_size
        except FileNotFoundError:
            return 0

    def close(self) -> None:
        """Fold the log in, checkpoint and close; closing twice is harmless. What cannot be
        folded in (a full disk) stays in the log for the next open."""
        if self.closed:
            return
        self.closed = True
        try:
            self.fold_link_weights(min_rows=1)
            self.checkpoint()
        except (duckdb.Error, OSError):
            log.exception("checkpoint at close failed")
        self.log.close()
        self.conn.close()
