"""The agent-facing reads as journal events: latency, what was found, when recall abstained.

Each handler is timed from its call to its result; the event is only appended to the journal's
in-memory list (the journal writes it later from its own timer), so recording adds no I/O to
the reply. ``inject`` events say whether the hook showed something or stayed silent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from keymem.protocol.errors import KeymemError
from keymem.protocol.worker import Handler
from keymem.services.journal import Journal

MS_DIGITS = 2
Summary = Callable[[dict[str, Any]], dict[str, Any]]


def _found(result: dict[str, Any]) -> dict[str, Any]:
    memories = result.get("memories") or []
    return {"ns": result.get("namespace"), "found": len(memories), "abstained": not memories}


def _surfaced(result: dict[str, Any]) -> dict[str, Any]:
    shown = len(result.get("memories") or [])
    return {
        "outcome": "shown" if shown else "silent",
        "shown": shown,
        "degraded": bool(result.get("degraded")),
    }


# method -> summary of its reply
SUMMARIES: dict[str, Summary] = {"recall": _found, "search": _found, "inject": _surfaced}


def journaled(journal: Journal, method: str, handler: Handler) -> Handler:
    """``handler`` recording one ``method`` event per call (an error records its code)."""
    summary = SUMMARIES[method]

    def handle(body: Any) -> Any:
        started = time.perf_counter()
        try:
            result = handler(body)
        except KeymemError as exc:
            ms = round((time.perf_counter() - started) * 1000, MS_DIGITS)
            journal.record(method, ms=ms, error=exc.code.value)
            raise
        ms = round((time.perf_counter() - started) * 1000, MS_DIGITS)
        journal.record(method, ms=ms, **summary(result))
        return result

    handle.__name__ = getattr(handler, "__name__", method)
    return handle
