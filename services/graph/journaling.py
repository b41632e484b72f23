"""What the graph's committed writes record in the event journal (services/journal.py).

Each write method's result is summarised as one event after its transaction committed (a
write that failed or was rolled back records nothing): counts and flags, never content. The
events and their fields are listed in docs/OBSERVABILITY.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from keymem.services.graph.state import GraphState
from keymem.services.journal import Journal

Summary = Callable[[GraphState, dict[str, Any]], dict[str, Any]]


def _namespace_of(state: GraphState, memory_id: Any) -> str | None:
    memory = state.memories.get(memory_id) if isinstance(memory_id, str) else None
    return memory.namespace if memory is not None else None


def _remembered(state: GraphState, result: dict[str, Any]) -> dict[str, Any]:
    saved = result.get("results", [result])
    return {
        "ns": _namespace_of(state, saved[0].get("saved")) if saved else None,
        "n": len(saved),
        "dedup": sum(1 for r in saved if r.get("deduplicated")),
    }


def _corrected(state: GraphState, result: dict[str, Any]) -> dict[str, Any]:
    return {"ns": _namespace_of(state, result.get("new_id"))}


def _forgotten(state: GraphState, result: dict[str, Any]) -> dict[str, Any]:
    return {"n": len(result.get("deleted", []))}


def _read(state: GraphState, result: dict[str, Any]) -> dict[str, Any]:
    memory = result.get("memory", {})
    return {
        "ns": memory.get("namespace"),
        "via_key": result.get("via_key_id") is not None,
        "learned_alias": "learned_alias" in result,
    }


def _confirmed(state: GraphState, result: dict[str, Any]) -> dict[str, Any]:
    return {"ns": _namespace_of(state, result.get("memory_id")), "new": bool(result["confirmed"])}


def _dismissed(state: GraphState, result: dict[str, Any]) -> dict[str, Any]:
    return {"ns": _namespace_of(state, result.get("memory_id")), "floored": result["floored"]}


def _hebbian(state: GraphState, result: dict[str, Any]) -> dict[str, Any]:
    return {
        "ns": _namespace_of(state, result.get("hit")),
        "strengthened": len(result.get("reinforced", [])),
        "decayed": len(result.get("decayed", [])),
        "associated": len(result.get("associated", [])),
    }


# method -> (event kind, summary of its result)
EVENTS: dict[str, tuple[str, Summary]] = {
    "remember": ("remember", _remembered),
    "remember_batch": ("remember", _remembered),
    "correct": ("correct", _corrected),
    "forget": ("forget", _forgotten),
    "read_memory": ("read", _read),
    "confirm_memory": ("confirm", _confirmed),
    "dismiss": ("dismiss", _dismissed),
    "reinforce_path": ("hebbian", _hebbian),
}


def record_results(
    journal: Journal, state: GraphState, method: str, results: list[Any], replayed: set[int]
) -> None:
    """One event per committed result of ``method``; errors and the results ``replayed`` for
    repeats of idempotent writes record nothing."""
    if method not in EVENTS:
        return
    kind, summary = EVENTS[method]
    for position, result in enumerate(results):
        if position not in replayed and isinstance(result, dict):
            journal.record(kind, **summary(state, result))
