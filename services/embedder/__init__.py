"""The embedder service: turns keys, queries and passages into vectors.

Stateless (invariant 3): any number of workers may run. ``build`` loads the configured model
(offline USE-m by default) before the worker registers. Contract: docs/MODELS.md.
"""

from __future__ import annotations

from keymem.services.embedder.service import build

__all__ = ["build"]
