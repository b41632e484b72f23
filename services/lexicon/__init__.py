"""The lexicon service: Kiwi tokens and a BM25 index derived from the graph's change feed.

Modules: ``tokenizer`` (text to terms), ``index`` (incremental BM25 per namespace), ``cache``
(persisted terms so a restart skips Kiwi), ``sync`` (snapshot + change feed, Clone pattern),
``keys`` (key candidates from text) and ``service`` (the worker's methods). See docs/LEXICON.md.
"""

from __future__ import annotations

from keymem.services.lexicon.service import build, preload

__all__ = ["build", "preload"]
