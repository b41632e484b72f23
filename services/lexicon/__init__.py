"""The lexicon service: Kiwi tokens and a BM25 index derived from the graph's change feed.

Its index arrives with the lexicon issue; until then it answers the built-in ``ping`` and
``stats``.
"""

from __future__ import annotations

from protocol.worker import Service
from services.config import Settings


def build(settings: Settings) -> Service:
    return Service("lexicon")
