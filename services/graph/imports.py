"""A whole export checked before ``keymem import`` opens its transaction.

An export is untrusted input: a hand-edited or damaged file must be refused whole, with one line
naming the first problem, never half-imported, never a traceback, and never accepted only to
stop the graph at its next start. Every table must be there with this schema's columns; every
cell must have its column's type (finite numbers, vectors of the graph's dimension); every row
must pass the rules the graph holds its own rows to (``rows.py``, strictly: content and key
limits, normalised namespaces, weights and depths in range); every reference must land on a row
of the file or of the target graph, in the same namespace; and version chains must not loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import duckdb
import numpy as np

from keymem.protocol.errors import BadRequest
from keymem.services.graph.rows import (
    chain_cycles,
    id_problem,
    key_problem,
    link_problem,
    memory_problem,
)
from keymem.store.portable import EXPORTED_TABLES, adapted_columns, adapted_row
from keymem.store.records import EVIDENCE_TYPES, KeyRecord, LinkRecord, MemoryRecord

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# Which cells of which table name a key or a memory that must exist.
KEY_REFERENCES: dict[str, tuple[str, ...]] = {
    "key_aliases": ("key_id",),
    "alias_candidates": ("key_id",),
}
MEMORY_REFERENCES: dict[str, tuple[str, ...]] = {
    "related": ("memory_id", "related_id"),
    "contradictions": ("memory_id", "other_id"),
    "confirmations": ("memory_id",),
}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _flat_numbers(value: list[Any]) -> bool:
    try:
        array = np.asarray(value)
    except ValueError:  # ragged
        return False
    return array.ndim == 1 and array.dtype.kind in "fiu"


def _cell_problem(value: Any, kind: str, nullable: bool, dim: int | None) -> str | None:
    if value is None:
        return None if nullable else "must not be null"
    if kind == "VARCHAR":
        return None if isinstance(value, str) else "must be a string"
    if kind == "BOOLEAN":
        return None if isinstance(value, bool) else "must be true or false"
    if kind == "DOUBLE":
        return None if _is_number(value) and math.isfinite(value) else "must be a finite number"
    if kind in ("INTEGER", "BIGINT"):
        bound = INT32_MAX if kind == "INTEGER" else INT64_MAX
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= bound:
            return None
        return "must be an integer"
    if kind == "BLOB":
        # one numpy conversion per vector, not a check per float: a store holds millions
        if not isinstance(value, list) or not _flat_numbers(value):
            return "must be a list of numbers"
        if dim is not None and len(value) != dim:
            return f"has dimension {len(value)}, this graph stores {dim}"
        return None
    return f"has a column type ({kind}) import does not know"


def _dim_of(document: dict[str, Any], target_meta: dict[str, str]) -> int | None:
    meta = document.get("meta", {})
    if not isinstance(meta, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in meta.items()
    ):
        raise BadRequest("meta must be an object of name -> string")
    dims = {meta.get("dim"), target_meta.get("dim")} - {None, ""}
    if len(dims) > 1:
        raise BadRequest(f"export has dim={meta['dim']}, this graph {target_meta['dim']}")
    if not dims:
        return None
    text = str(dims.pop())
    if not text.isdigit() or int(text) == 0:
        raise BadRequest(f"meta dim must be a positive integer, got {text!r}")
    return int(text)


class Checked:
    """The export's rows as dicts by column name, type-checked, table by table."""

    def __init__(
        self, document: Any, conn: duckdb.DuckDBPyConnection, target_meta: dict[str, str]
    ) -> None:
        if not isinstance(document, dict) or not isinstance(document.get("tables"), dict):
            raise BadRequest("the export has no tables object")
        self.dim = _dim_of(document, target_meta)
        self.rows: dict[str, list[dict[str, Any]]] = {}
        tables = document["tables"]
        for table in EXPORTED_TABLES:
            if not isinstance(tables.get(table), dict):
                raise BadRequest(f"table {table} is missing (or not an object)")
            self.rows[table] = self._table(conn, table, tables[table])
        if self.dim is None and self.rows["keys"]:
            self.dim = len(self.rows["keys"][0]["vector"])
            for at, row in enumerate(self.rows["keys"]):
                if len(row["vector"]) != self.dim:
                    raise BadRequest(
                        f"keys row {at}: vector has dimension {len(row['vector'])}, "
                        f"the file's first key {self.dim}"
                    )

    def _table(
        self, conn: duckdb.DuckDBPyConnection, table: str, raw: dict[str, Any]
    ) -> list[dict[str, Any]]:
        names, rows = raw.get("columns"), raw.get("rows")
        if not isinstance(names, list) or not isinstance(rows, list):
            raise BadRequest(f"table {table} needs a columns list and a rows list")
        columns = adapted_columns(conn, table, names)
        described = {
            str(name): (str(kind), str(null) == "YES")
            for name, kind, null, *_ in conn.execute(f"DESCRIBE {table}").fetchall()
        }
        out = []
        for at, row in enumerate(rows):
            if not isinstance(row, list) or len(row) != len(names):
                raise BadRequest(f"{table} row {at}: must be a list of {len(names)} values")
            values = dict(zip(columns, adapted_row(row, names, columns), strict=True))
            for name, value in values.items():
                kind, nullable = described[name]
                problem = _cell_problem(value, kind, nullable, self.dim)
                if problem is not None:
                    raise BadRequest(f"{table} row {at}: {name} {problem}")
            out.append(values)
        return out


def _memory(row: dict[str, Any]) -> MemoryRecord:
    return MemoryRecord(**row)


def _key(row: dict[str, Any]) -> KeyRecord:
    return KeyRecord(**{**row, "vector": np.asarray(row["vector"], dtype=np.float32)})


def _unique_ids(table: str, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    by_id: dict[str, dict[str, Any]] = {}
    for at, row in enumerate(rows):
        problem = id_problem(row["id"])
        if problem is not None:
            raise BadRequest(f"{table} row {at}: {problem}")
        if row["id"] in by_id:
            raise BadRequest(f"{table} row {at}: id {row['id']} appears twice")
        by_id[row["id"]] = row
    return by_id


def validate_export(document: Any, conn: duckdb.DuckDBPyConnection) -> None:
    """Raise ``BadRequest`` naming the first problem of ``document`` for the graph at ``conn``."""
    target_meta = {
        str(n): str(v) for n, v in conn.execute("SELECT name, value FROM meta").fetchall()
    }
    checked = Checked(document, conn, target_meta)
    keys = _unique_ids("keys", checked.rows["keys"])
    memories = _unique_ids("memories", checked.rows["memories"])
    # the namespace of every key and memory an export row may point at: the file's and the graph's
    key_space = {
        str(i): str(ns) for i, ns in conn.execute("SELECT id, namespace FROM keys").fetchall()
    }
    memory_space = {
        str(i): str(ns) for i, ns in conn.execute("SELECT id, namespace FROM memories").fetchall()
    }
    key_space.update({k: row["namespace"] for k, row in keys.items()})
    memory_space.update({m: row["namespace"] for m, row in memories.items()})

    def each(table: str, problem: Callable[[dict[str, Any]], str | None]) -> None:
        for at, row in enumerate(checked.rows[table]):
            reason = problem(row)
            if reason is not None:
                raise BadRequest(f"{table} row {at}: {reason}")

    each("keys", lambda row: key_problem(_key(row), checked.dim, strict=True))
    each("memories", lambda row: memory_problem(_memory(row), strict=True))

    def version_problem(row: dict[str, Any]) -> str | None:
        for name in ("supersedes", "superseded_by"):
            other = row[name]
            if other is not None and memory_space.get(other) != row["namespace"]:
                return f"{name} names memory {other}, which is not in namespace {row['namespace']}"
        return None

    each("memories", version_problem)
    chains = {
        str(i): nxt for i, nxt in conn.execute("SELECT id, superseded_by FROM memories").fetchall()
    }
    chains.update({m: row["superseded_by"] for m, row in memories.items()})
    looped = chain_cycles(chains)
    if looped:
        raise BadRequest(f"memories {', '.join(sorted(looped)[:4])} supersede each other in a loop")

    linked: set[tuple[str, str]] = set()

    def link(row: dict[str, Any]) -> str | None:
        key_ns, memory_ns = key_space.get(row["key_id"]), memory_space.get(row["memory_id"])
        if key_ns is None or memory_ns is None:
            return f"links key {row['key_id']} to memory {row['memory_id']}; one does not exist"
        if key_ns != memory_ns:
            return f"links namespace {key_ns!r} to namespace {memory_ns!r}"
        pair = (row["key_id"], row["memory_id"])
        if pair in linked:  # the table has no key to refuse it: one link per pair
            return f"links key {pair[0]} to memory {pair[1]} twice"
        linked.add(pair)
        return link_problem(LinkRecord(**row))

    each("links", link)
    for references, space, kind in (
        (KEY_REFERENCES, key_space, "key"),
        (MEMORY_REFERENCES, memory_space, "memory"),
    ):
        for table, columns in references.items():
            for column in columns:
                each(table, partial(_missing, column=column, space=space, kind=kind))
    each(
        "confirmations",
        lambda row: (
            None
            if row["evidence"] in EVIDENCE_TYPES
            else f"evidence must be one of {', '.join(EVIDENCE_TYPES)}"
        ),
    )


def _missing(row: dict[str, Any], *, column: str, space: dict[str, str], kind: str) -> str | None:
    value = row[column]
    return None if value in space else f"names {kind} {value}, which does not exist"
