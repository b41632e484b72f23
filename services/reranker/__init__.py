"""The reranker service: scores (query, passage) pairs for the final recall order.

Stateless (invariant 3). Offline by default (embedding cosine with the default embedding
model); a cross-encoder when one is configured; ``KEYMEM_RERANK=false`` turns it off.
Contract: docs/MODELS.md.
"""

from __future__ import annotations

from keymem.services.reranker.service import build

__all__ = ["build"]
