"""Validate request bodies: every bad input becomes a ``BadRequest`` or ``TooLarge`` naming
the field, before any model work starts (invariant 6). The reranker validates with these too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from keymem.protocol.errors import BadRequest, TooLarge
from keymem.services.embedder.backends.base import KINDS, Kind

MAX_TEXTS = 256
# Characters per request after truncation: bounds one handler call (~0.6 s of USE-m time).
MAX_REQUEST_CHARS = 32_768


def require_map(body: Any, fields: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadRequest(f"body must be a map with {fields}, got {type(body).__name__}")
    return body


def check_text(value: Any, where: str) -> str:
    """A non-blank string (bytes, numbers, None and whitespace-only are refused)."""
    if not isinstance(value, str):
        raise BadRequest(f"{where} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise BadRequest(f"{where} is empty")
    # msgpack already refuses invalid UTF-8; lone surrogates can still arrive via other paths.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequest(f"{where} is not valid Unicode text: {exc.reason}") from exc
    return value


def check_texts(value: Any, where: str, max_items: int) -> list[str]:
    if not isinstance(value, list):
        raise BadRequest(f"{where} must be a list of strings, got {type(value).__name__}")
    if not value:
        raise BadRequest(f"{where} is empty")
    if len(value) > max_items:
        raise TooLarge(
            f"{where} has {len(value)} items; at most {max_items} per request",
            {"limit": max_items, "got": len(value)},
        )
    return [check_text(item, f"{where}[{i}]") for i, item in enumerate(value)]


def cut(texts: list[str], max_chars: int) -> tuple[list[str], set[int]]:
    """Texts cut at ``max_chars``, and the indexes that were cut."""
    cut_at = {i for i, t in enumerate(texts) if len(t) > max_chars}
    return [t[:max_chars] if i in cut_at else t for i, t in enumerate(texts)], cut_at


def check_total(texts: list[str], where: str) -> None:
    total = sum(map(len, texts))
    if total > MAX_REQUEST_CHARS:
        raise TooLarge(
            f"{where} hold {total} characters after truncation; at most {MAX_REQUEST_CHARS} "
            "per request (split it)",
            {"limit": MAX_REQUEST_CHARS, "got": total},
        )


@dataclass(frozen=True)
class EmbedRequest:
    texts: list[str]  # already cut at the backend's max_chars
    kind: Kind
    cut: set[int]


def parse_embed(body: Any, max_chars: int) -> EmbedRequest:
    body = require_map(body, '"texts" and "kind"')
    unknown = set(body) - {"texts", "kind"}
    if unknown:
        raise BadRequest(f"unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    kind = body.get("kind", "key")
    if kind not in KINDS:
        raise BadRequest(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    texts, cut_at = cut(check_texts(body.get("texts"), "texts", MAX_TEXTS), max_chars)
    check_total(texts, "texts")
    return EmbedRequest(texts, kind, cut_at)
