"""Reading a request body's fields: one typed error per mistake, before anything changes.

Every service validates its bodies the same way (invariant 6: bad input gets a clear, typed
error and changes nothing), so the checks live here once: a ``BadRequest`` names the field and
what it must be, a value over its size limit is ``TooLarge``. Service-specific shapes (a
memory's keys, a batch's items) are built from these in each service's own request module.
"""

from __future__ import annotations

from typing import Any

from keymem.protocol.errors import BadRequest, TooLarge
from keymem.protocol.limits import BATCH_MAX_ITEMS


def body_of(raw: Any) -> dict[str, Any]:
    """The body as a map; a missing body is an empty one."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BadRequest(f"body must be a map, got {type(raw).__name__}")
    return raw


def batch_items(body: dict[str, Any]) -> list[Any]:
    """A batch request's ``items``: 1 to ``BATCH_MAX_ITEMS`` of them."""
    items = body.get("items")
    if not isinstance(items, list) or not items:
        raise BadRequest("items must be a non-empty list")
    if len(items) > BATCH_MAX_ITEMS:
        raise TooLarge(f"at most {BATCH_MAX_ITEMS} items per batch")
    return items


# Free-form objects (a memory's ``source``, tuning maps) are nested at most this deep: their
# readers (JSON encoders, pydantic, the MCP SDK's parser, which stops at 200) recurse, and a
# body nested deeper than they can go must be a clear error, not a silent drop or a crash.
FREE_FORM_MAX_DEPTH = 16


def depth_of(value: Any, limit: int) -> int:
    """How deeply ``value``'s lists and maps nest (a scalar is 0), counted up to ``limit + 1``.

    Iterative, so a hostile value cannot exhaust the stack of the check meant to refuse it.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth + 1 > limit:
            return limit + 1
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def check_depth(value: Any, name: str, limit: int = FREE_FORM_MAX_DEPTH) -> None:
    if depth_of(value, limit) > limit:
        raise BadRequest(f"{name} is nested more than {limit} levels deep")


def opt_str(body: dict[str, Any], name: str, max_chars: int) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string")
    if len(value) > max_chars:
        raise TooLarge(f"{name} is longer than {max_chars} characters")
    return value


def req_str(body: dict[str, Any], name: str, max_chars: int, *, blank: bool = False) -> str:
    """A required string; ``blank`` allows one of only whitespace (a search for nothing)."""
    value = opt_str(body, name, max_chars)
    if value is None or (not blank and not value.strip()):
        raise BadRequest(f"{name} must be a non-empty string")
    return value


def opt_int(body: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = opt_int_or_none(body, name, low, high)
    return default if value is None else value


def opt_int_or_none(body: dict[str, Any], name: str, low: int, high: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{name} must be an integer")
    if not low <= value <= high:
        raise BadRequest(f"{name} must be in [{low}, {high}]")
    return value


def opt_number(body: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"{name} must be a number")
    if not low <= value <= high:
        raise BadRequest(f"{name} must be in [{low}, {high}]")
    return float(value)


def opt_bool(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise BadRequest(f"{name} must be true or false")
    return value


def opt_choice(body: dict[str, Any], name: str, default: str, allowed: tuple[str, ...]) -> str:
    value = body.get(name, default)
    if value not in allowed:
        raise BadRequest(f"{name} must be one of {', '.join(allowed)}")
    return str(value)


def only_fields(body: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(str(name) for name in set(body) - set(allowed))
    if unknown:
        raise BadRequest(f"unknown {where} field(s) {', '.join(unknown)}")
