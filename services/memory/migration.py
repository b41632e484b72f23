"""Switching embedding models: re-embed every key into the embedder's vector space.

The graph records which space its key vectors live in (fingerprint and dimension). When the
embedder now serves another space, cosines between the two are meaningless, so the graph
refuses writes from it; this module re-embeds every key through the graph's staged migration
(``reembed_begin`` → pages of ``reembed_keys``/``reembed_put`` → ``reembed_commit``, which
backs the file up first and swaps all vectors in one transaction). ``keymem up`` runs it when
needed unless ``KEYMEM_AUTO_MIGRATE=false``; ``keymem migrate`` runs it on demand.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import Conflict

PAGE_KEYS = 256  # one embed request's worth of texts
STEP_TIMEOUT_MS = 30_000
COMMIT_TIMEOUT_MS = 600_000
COMMIT_ATTEMPTS = 3

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Spaces:
    embedder: dict[str, Any]  # {"fingerprint", "dim"}
    graph: dict[str, Any] | None  # None: no vectors recorded yet

    @property
    def mismatch(self) -> bool:
        if self.graph is None:
            return False
        return (self.graph.get("fingerprint"), self.graph.get("dim")) != (
            self.embedder["fingerprint"],
            self.embedder["dim"],
        )

    def describe(self) -> str:
        recorded = self.graph or {}
        return (
            f"the graph's keys were embedded with {recorded.get('fingerprint')!r} "
            f"({recorded.get('dim')}-d); the embedder now serves "
            f"{self.embedder['fingerprint']!r} ({self.embedder['dim']}-d)"
        )


def spaces(client: Client) -> Spaces:
    info = client.call("embedder", "info", timeout_ms=STEP_TIMEOUT_MS)
    recorded = client.call("graph", "fingerprint", timeout_ms=STEP_TIMEOUT_MS)
    return Spaces({"fingerprint": info["fingerprint"], "dim": info["dim"]}, recorded)


def reembed_all(client: Client, progress: Progress | None = None) -> dict[str, Any]:
    """Re-embed every key with the current embedder; returns the graph's commit report.

    Keys created while the pages were being re-embedded make the commit refuse (``conflict``);
    another pass stages them (and refreshes the rest) before committing again.
    """
    target = spaces(client).embedder
    begun = client.call("graph", "reembed_begin", target, timeout_ms=STEP_TIMEOUT_MS)
    token, attempts = begun["token"], 0
    while True:
        attempts += 1
        _stage_every_key(client, token, begun["total"], progress)
        try:
            report: dict[str, Any] = client.call(
                "graph", "reembed_commit", {"token": token}, timeout_ms=COMMIT_TIMEOUT_MS
            )
            return report
        except Conflict:
            if attempts >= COMMIT_ATTEMPTS:
                raise


def _stage_every_key(client: Client, token: str, total: int, progress: Progress | None) -> None:
    done, after = 0, None
    while True:
        page = client.call(
            "graph",
            "reembed_keys",
            {"after": after, "limit": PAGE_KEYS},
            timeout_ms=STEP_TIMEOUT_MS,
        )
        keys = page["keys"]
        if keys:
            embedded = client.call(
                "embedder",
                "embed",
                {"texts": [k["concept"] for k in keys], "kind": "key"},
                timeout_ms=STEP_TIMEOUT_MS,
            )
            client.call(
                "graph",
                "reembed_put",
                {
                    "token": token,
                    "key_ids": [k["key_id"] for k in keys],
                    "vectors": embedded["vectors"],
                },
                timeout_ms=STEP_TIMEOUT_MS,
            )
            done += len(keys)
            if progress is not None:
                progress(done, max(total, done))
        after = page["next"]
        if after is None:
            return


def stderr_progress(done: int, total: int) -> None:
    end = "\n" if done >= total else ""
    print(f"\rre-embedding keys: {done}/{total}", end=end, file=sys.stderr, flush=True)


def migrate_if_needed(
    client: Client, *, force: bool = False, progress: Progress | None = stderr_progress
) -> tuple[Spaces, dict[str, Any] | None]:
    """Re-embed when the spaces differ (or ``force``); returns the spaces and the report."""
    found = spaces(client)
    if not (found.mismatch or (force and found.graph is not None)):
        return found, None
    print(f"keymem: {found.describe()}; re-embedding every key", file=sys.stderr)
    return found, reembed_all(client, progress)
