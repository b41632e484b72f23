"""The key thresholds of the model the embedder runs, for every graph call that needs them.

Cosine thresholds (key merge, key recall, short-key merge, alias floor) only mean something for
one embedding model, and only the embedder knows which model it runs. The graph starts with a
default profile; the router passes the embedder's own with each write and key match, fetched
once per model fingerprint (the embedder reports its fingerprint with every embedding).
"""

from __future__ import annotations

from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError

INFO_TIMEOUT_MS = 2_000


class EmbedderProfile:
    def __init__(self, client: Client) -> None:
        self.client = client
        self._thresholds: dict[str, dict[str, Any]] = {}

    def thresholds(self, fingerprint: str) -> dict[str, Any] | None:
        """The profile for ``fingerprint``; None when the embedder cannot say (the graph's
        default applies then)."""
        if fingerprint not in self._thresholds:
            try:
                info = self.client.call("embedder", "info", timeout_ms=INFO_TIMEOUT_MS)
            except KeymemError:
                return None
            self._thresholds[str(info["fingerprint"])] = dict(info["thresholds"])
        return self._thresholds.get(fingerprint)
