"""Typed errors that travel on the wire.

Every failure a peer can observe has a stable code (the string on the wire) and a human
message. Clients raise the matching exception class, so callers can catch ``Unavailable``
without parsing text.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    BAD_REQUEST = "bad_request"
    NOT_FOUND = "not_found"
    UNAVAILABLE = "unavailable"
    TIMEOUT = "timeout"
    INTERNAL = "internal"
    CONFLICT = "conflict"
    TOO_LARGE = "too_large"
    UNSUPPORTED_VERSION = "unsupported_version"
    FORBIDDEN = "forbidden"
    KEYS_UNHELD = "keys_unheld"


class KeymemError(Exception):
    """Base of every error a keymem peer reports."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail or {}

    def __str__(self) -> str:
        return f"{self.code.value}: {self.message}"

    def to_wire(self) -> dict[str, Any]:
        body: dict[str, Any] = {"message": self.message}
        if self.detail:
            body["detail"] = self.detail
        return body


class BadRequest(KeymemError):
    code = ErrorCode.BAD_REQUEST


class NotFound(KeymemError):
    code = ErrorCode.NOT_FOUND


class Unavailable(KeymemError):
    code = ErrorCode.UNAVAILABLE


# ``detail`` of an ``unavailable`` that a moment may cure (a worker died or is restarting, the
# connection to the router dropped), as opposed to one that waiting cannot (a full disk).
TRANSIENT = "transient"


def transient(message: str) -> Unavailable:
    """An ``unavailable`` worth retrying shortly, within the caller's deadline."""
    return Unavailable(message, {TRANSIENT: True})


def is_transient(error: KeymemError) -> bool:
    return isinstance(error, Unavailable) and error.detail.get(TRANSIENT) is True


class DeadlineExceeded(KeymemError):
    code = ErrorCode.TIMEOUT


class InternalError(KeymemError):
    code = ErrorCode.INTERNAL


class Conflict(KeymemError):
    code = ErrorCode.CONFLICT


class TooLarge(KeymemError):
    code = ErrorCode.TOO_LARGE


class UnsupportedVersion(KeymemError):
    code = ErrorCode.UNSUPPORTED_VERSION


class Forbidden(KeymemError):
    """The caller's key may not do this (a namespace or service outside its access)."""

    code = ErrorCode.FORBIDDEN


class KeysUnheld(KeymemError):
    """A write under keys the graph does not hold by their text: nothing was written, every
    other check passed, and ``detail["unheld_keys"]`` names the texts whose vectors the write
    must carry when sent again. A step of the write protocol between the memory service and
    the graph, not a failure: stats count it apart from errors."""

    code = ErrorCode.KEYS_UNHELD


_BY_CODE: dict[str, type[KeymemError]] = {
    cls.code.value: cls
    for cls in (
        BadRequest,
        NotFound,
        Unavailable,
        DeadlineExceeded,
        InternalError,
        Conflict,
        TooLarge,
        UnsupportedVersion,
        Forbidden,
        KeysUnheld,
    )
}


def error_from_wire(code: str, body: Any) -> KeymemError:
    """Rebuild the typed exception a peer sent; unknown codes become ``InternalError``."""
    message = "no message"
    detail: dict[str, Any] | None = None
    if isinstance(body, dict):
        message = str(body.get("message", message))
        raw_detail = body.get("detail")
        detail = raw_detail if isinstance(raw_detail, dict) else None
    cls = _BY_CODE.get(code)
    if cls is None:
        return InternalError(f"peer sent unknown error code {code!r}: {message}", detail)
    return cls(message, detail)


def outcome_to_wire(outcome: Any) -> dict[str, Any]:
    """One item's outcome in a reply that answers several items each on its own: its result,
    or its typed error (``outcome_from_wire`` reads it back)."""
    if isinstance(outcome, KeymemError):
        return {"error": {"code": outcome.code.value, **outcome.to_wire()}}
    return {"result": outcome}


def outcome_from_wire(item: Any) -> Any:
    """An item's result, or the typed error it failed with, as ``outcome_to_wire`` sent it."""
    if isinstance(item, dict) and "result" in item:
        return item["result"]
    error = item.get("error") if isinstance(item, dict) else None
    if not isinstance(error, dict):
        return InternalError(f"an item's outcome is neither a result nor an error: {item!r:.200}")
    return error_from_wire(str(error.get("code")), error)
