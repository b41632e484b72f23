"""Tables of the graph file and their forward migrations.

``meta.schema_version`` records how far a file has been migrated; opening a file applies every
later migration in one transaction, so an old file is upgraded in place and a file from a newer
keymem is refused instead of being misread. Migrations are append-only: never edit a shipped one.
"""

from __future__ import annotations

import duckdb

from keymem.protocol.errors import Conflict, Unavailable

# Every column the service reads at start; vectors are float32 bytes (dim in meta).
_V1 = """
CREATE TABLE meta (name VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE keys (
    id VARCHAR PRIMARY KEY, namespace VARCHAR NOT NULL, concept VARCHAR NOT NULL,
    key_type VARCHAR NOT NULL, created_at DOUBLE NOT NULL, vector BLOB NOT NULL
);
CREATE TABLE key_aliases (
    key_id VARCHAR NOT NULL, alias VARCHAR NOT NULL, learned BOOLEAN NOT NULL,
    added_at DOUBLE NOT NULL, hits INTEGER NOT NULL, last_hit_at DOUBLE NOT NULL
);
CREATE TABLE alias_candidates (
    key_id VARCHAR NOT NULL, query_norm VARCHAR NOT NULL, query VARCHAR NOT NULL,
    count INTEGER NOT NULL, last_seen DOUBLE NOT NULL
);
CREATE TABLE memories (
    id VARCHAR PRIMARY KEY, namespace VARCHAR NOT NULL, content VARCHAR NOT NULL,
    created_at DOUBLE NOT NULL, source VARCHAR, supersedes VARCHAR, superseded_by VARCHAR,
    depth DOUBLE NOT NULL, access_count INTEGER NOT NULL, last_accessed DOUBLE NOT NULL,
    expires_at DOUBLE, last_confirmed_at DOUBLE NOT NULL, confirmation_count INTEGER NOT NULL,
    decay_profile VARCHAR NOT NULL, last_confirmation_evidence VARCHAR,
    last_confirmation_source VARCHAR, last_confirmation_id VARCHAR
);
CREATE TABLE links (
    key_id VARCHAR NOT NULL, memory_id VARCHAR NOT NULL, weight DOUBLE NOT NULL,
    auto BOOLEAN NOT NULL, PRIMARY KEY (key_id, memory_id)
);
CREATE TABLE related (
    memory_id VARCHAR NOT NULL, related_id VARCHAR NOT NULL, pos INTEGER NOT NULL
);
CREATE TABLE contradictions (memory_id VARCHAR NOT NULL, other_id VARCHAR NOT NULL);
CREATE TABLE confirmations (
    memory_id VARCHAR NOT NULL, confirmed_at DOUBLE NOT NULL, evidence VARCHAR NOT NULL,
    source VARCHAR, confirmation_id VARCHAR
);
CREATE TABLE events (
    seq BIGINT PRIMARY KEY, op VARCHAR NOT NULL, memory_id VARCHAR NOT NULL,
    namespace VARCHAR NOT NULL, committed_at DOUBLE NOT NULL
);
"""

# Link weights change on every traversed read and dismissal. DuckDB cannot update a row through
# an index (an UPDATE scans the table: ~7 ms CPU on 450k links), so weight changes are appended
# here and folded into ``links`` in bulk when the service is idle (``fold_link_weights``).
_V2 = """
CREATE TABLE link_weights (
    key_id VARCHAR NOT NULL, memory_id VARCHAR NOT NULL, weight DOUBLE NOT NULL,
    serial BIGINT NOT NULL
);
"""

# Hook learning (services/graph/feedback.py) makes links of its own: auto-typed associations a
# read taught, which start lower, fade when not confirmed, and are capped per memory. The file
# must know them apart from links written with a memory, or a restart would lift those bounds.
_V3 = """
ALTER TABLE links ADD COLUMN learned BOOLEAN NOT NULL DEFAULT false;
"""

# Idempotent writes (services/graph/idempotency.py): the result of each keyed write, committed
# with it, so a retry of a write whose reply was lost gets that result instead of a second write.
_V4 = """
CREATE TABLE write_outcomes (
    key VARCHAR PRIMARY KEY, method VARCHAR NOT NULL, result BLOB NOT NULL,
    committed_at DOUBLE NOT NULL
);
"""

# Sleep (services/graph/sleep.py) flags pairs of active memories that say nearly the same thing,
# for the agent to merge or correct; like ``contradictions``, a pair per row, both directions.
_V5 = """
CREATE TABLE near_duplicates (memory_id VARCHAR NOT NULL, other_id VARCHAR NOT NULL);
"""

# ``links`` without its primary key (DuckDB cannot drop a constraint: the table is copied). The
# key's ART index over (key_id, memory_id) is DuckDB's largest structure at scale (~290 MB at
# 4.5M links, ~64 B a link), and every insert keeps the index nodes it touches in the buffer pool
# until the next checkpoint: at 1M memories three remember_batch calls of 100 filled the
# graph's 256 MB pool (OutOfMemoryException), and loading those nodes cost ~0.4 ms of CPU per
# link inserted. Nothing reads links through it (the graph loads them whole; deletes go by one
# column). One row per (key, memory) is kept by the graph, the file's only writer (its state and
# ``Changes.new_links`` hold a link per pair), and by the import's validation.
_V6 = """
CREATE TABLE links_v6 (
    key_id VARCHAR NOT NULL, memory_id VARCHAR NOT NULL, weight DOUBLE NOT NULL,
    auto BOOLEAN NOT NULL, learned BOOLEAN NOT NULL DEFAULT false
);
INSERT INTO links_v6 SELECT key_id, memory_id, weight, auto, learned FROM links;
DROP TABLE links;
ALTER TABLE links_v6 RENAME TO links;
"""

# A keyed write's outcome rides on one of its change-feed event rows: one INSERT fewer per
# durable remember (~1 ms of DuckDB CPU of ~8: DuckDB costs per statement, not per row).
# ``write_outcomes`` keeps the outcomes of keyed writes that append no event (a confirmation, a
# dismissal) and those of event rows the feed's pruning drops; it loses its primary key so that
# such a move can never collide with a key reused after its retention (the ledger keeps the
# newest outcome of a key). Outcome columns are NULL on events of unkeyed writes.
_V7 = """
ALTER TABLE events ADD COLUMN outcome_key VARCHAR;
ALTER TABLE events ADD COLUMN outcome_method VARCHAR;
ALTER TABLE events ADD COLUMN outcome_result BLOB;
CREATE TABLE write_outcomes_v7 (
    key VARCHAR NOT NULL, method VARCHAR NOT NULL, result BLOB NOT NULL,
    committed_at DOUBLE NOT NULL
);
INSERT INTO write_outcomes_v7 SELECT key, method, result, committed_at FROM write_outcomes;
DROP TABLE write_outcomes;
ALTER TABLE write_outcomes_v7 RENAME TO write_outcomes;
"""

# The dense candidate leg's memory vectors (services/graph/memory_vectors.py): per memory the
# signs of its head's passage vector, packed (64 bytes at 512-d), and the embedder fingerprint
# they came from (codes of another model are not comparable, and are vectorised again). No
# primary key: the graph, the file's only writer, keeps one row per memory (a new code deletes
# the old row in the same transaction), and an index would cost ~64 B a memory for nothing.
_V8 = """
CREATE TABLE memory_vectors (
    memory_id VARCHAR NOT NULL, code BLOB NOT NULL, fingerprint VARCHAR NOT NULL
);
"""

# A memory's code is made of its head as the cosine reads it, which leaves a head's questions out
# (services/reranker/scorers.py ``stated``); a code made before that, of a head that asks, is
# dropped so the idle-time pass makes it again (every other code reads the same). A question
# mark anywhere in the text is a superset of a head that asks: a few codes more, made once.
_V9 = """
DELETE FROM memory_vectors WHERE memory_id IN (
    SELECT id FROM memories WHERE content LIKE '%?%' OR content LIKE '%？%'
);
"""

# Index i holds the script that takes a file from version i to i + 1.
MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9)
SCHEMA_VERSION = len(MIGRATIONS)

# Tables in dependency-free order, for export/import and for tests that compare contents
# (write_outcomes is not among them: it only serves retries of the last hour's writes).
# near_duplicates is not exported: every sleep pass derives it again from the memories.
TABLES = (
    "meta",
    "keys",
    "key_aliases",
    "alias_candidates",
    "memories",
    "links",
    "link_weights",
    "related",
    "contradictions",
    "near_duplicates",
    "memory_vectors",
    "confirmations",
    "events",
)


class DamagedMeta(Unavailable):
    """A number the graph file's ``meta`` table keeps does not read as one: the file is damaged
    outside keymem, and no value the graph could guess for it is safe (``log_applied`` says
    which logged writes are in the file, ``schema_version`` which migrations ran)."""


def damaged_meta(name: str, value: str, where: str) -> DamagedMeta:
    return DamagedMeta(
        f"{where} is damaged: its meta row {name!r} holds {value!r}, not a number keymem "
        "writes there (nothing was changed). Restore the newest `keymem backup` over it with "
        "the services down; `keymem doctor` says where it is",
        {"row": name, "value": value},
    )


def current_version(conn: duckdb.DuckDBPyConnection) -> int:
    exists = conn.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'meta'"
    ).fetchall()[0][0]
    if not exists:
        return 0
    row = conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchall()
    if not row:
        return 0
    value = str(row[0][0])
    if not value.isdigit():
        raise damaged_meta("schema_version", value, "the graph file")
    return int(value)


def migrate(conn: duckdb.DuckDBPyConnection) -> int:
    """Bring the file up to ``SCHEMA_VERSION``; returns the version it started at."""
    start = current_version(conn)
    if start > SCHEMA_VERSION:
        raise Conflict(
            f"graph file has schema version {start}, newer than this keymem's {SCHEMA_VERSION}",
            {"schema_version": start, "supported": SCHEMA_VERSION},
        )
    if start == SCHEMA_VERSION:
        return start
    conn.execute("BEGIN TRANSACTION")
    try:
        for script in MIGRATIONS[start:]:
            for statement in script.split(";"):
                if statement.strip():
                    conn.execute(statement)
        conn.execute(
            "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)]
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return start
