"""Validation of request bodies: every bad input becomes a typed error before anything changes.

Write handlers parse their whole request (every batch item included) with these functions
first and only then touch the graph, so a rejected request leaves no trace (invariant 6).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from keymem.protocol import fields
from keymem.protocol.errors import BadRequest, TooLarge
from keymem.protocol.limits import (
    BATCH_MAX_ITEMS,
    CONTENT_MAX_CHARS,
    ID_MAX_CHARS,
    KEY_MAX_CHARS,
    KEYS_PER_MEMORY_MAX,
    NAMESPACE_MAX_CHARS,
    RELATED_MAX,
)
from keymem.services.graph.keyindex import UNHELD_VECTOR
from keymem.services.graph.text import normalize_namespace, usable_key
from keymem.store.records import DECAY_PROFILES, EVIDENCE_TYPES, KEY_TYPES

MAX_TTL_SECONDS = 100 * 365 * 86_400
MAX_SOURCE_JSON_BYTES = 4_096
MAX_IDS_PER_REQUEST = 1_000
# Key texts one request may name apart from its items' keys (``embedded_of``, a
# ``held_vectors`` lookup): every key of the largest batch.
KEYS_PER_BATCH_MAX = BATCH_MAX_ITEMS * KEYS_PER_MEMORY_MAX


def opt_str(body: dict[str, Any], name: str, max_chars: int = ID_MAX_CHARS) -> str | None:
    """An optional string field; the graph's fields are ids unless told otherwise."""
    return fields.opt_str(body, name, max_chars)


def req_str(body: dict[str, Any], name: str, max_chars: int = ID_MAX_CHARS) -> str:
    return fields.req_str(body, name, max_chars)


def namespace_of(body: dict[str, Any]) -> str:
    """The namespace a request is confined to; omitted, it is ``default`` (never "any").

    A namespace is a boundary: an id of another namespace is ``not_found`` unless the caller
    names that namespace, so a request that leaves it out cannot reach across.
    """
    return normalize_namespace(opt_str(body, "namespace", NAMESPACE_MAX_CHARS))


def namespace_filter(body: dict[str, Any]) -> str | None:
    """The namespace aggregate counts are restricted to (``None``: every namespace's totals)."""
    raw = opt_str(body, "namespace", NAMESPACE_MAX_CHARS)
    return None if raw is None or not raw.strip() else normalize_namespace(raw)


def id_list(body: dict[str, Any], name: str, max_items: int = MAX_IDS_PER_REQUEST) -> list[str]:
    value = body.get(name)
    if not isinstance(value, list):
        raise BadRequest(f"{name} must be a list of ids")
    if len(value) > max_items:
        raise TooLarge(f"{name} has more than {max_items} entries")
    if not all(isinstance(v, str) and 0 < len(v) <= ID_MAX_CHARS for v in value):
        raise BadRequest(f"{name} must contain only id strings")
    return list(dict.fromkeys(value))


def content_of(body: dict[str, Any]) -> str:
    value = body.get("content")
    if not isinstance(value, str) or not value.strip():
        raise BadRequest("content must be a non-empty string")
    if len(value) > CONTENT_MAX_CHARS:
        raise TooLarge(
            f"content has {len(value)} characters; the limit is {CONTENT_MAX_CHARS}",
            {"limit_chars": CONTENT_MAX_CHARS},
        )
    return value


def ttl_of(body: dict[str, Any]) -> float | None:
    value = body.get("ttl_seconds")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise BadRequest("ttl_seconds must be a number")
    if value <= 0 or value > MAX_TTL_SECONDS:
        raise BadRequest(f"ttl_seconds must be in (0, {MAX_TTL_SECONDS}]")
    return float(value)


def decay_profile_of(body: dict[str, Any]) -> str | None:
    value = body.get("decay_profile")
    if value is None:
        return None
    if value not in DECAY_PROFILES:
        raise BadRequest(f"decay_profile must be one of {', '.join(DECAY_PROFILES)}")
    return str(value)


def evidence_of(body: dict[str, Any]) -> str:
    value = body.get("evidence")
    if value not in EVIDENCE_TYPES:
        raise BadRequest(f"evidence must be one of {', '.join(EVIDENCE_TYPES)}")
    return str(value)


def source_of(body: dict[str, Any]) -> dict[str, Any] | None:
    value = body.get("source")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest("source must be an object")
    fields.check_depth(value, "source")
    try:
        encoded = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"source must be JSON-like: {exc}") from exc
    if len(encoded.encode()) > MAX_SOURCE_JSON_BYTES:
        raise TooLarge(f"source is larger than {MAX_SOURCE_JSON_BYTES} bytes as JSON")
    return value


def related_of(body: dict[str, Any]) -> list[str] | None:
    if body.get("related_to") is None:
        return None
    return id_list(body, "related_to", RELATED_MAX)


@dataclass(frozen=True, slots=True)
class KeyInput:
    surface: str
    vector: np.ndarray
    key_type: str
    # Extracted from the content by keymem, not chosen by the agent: its link starts weaker.
    auto: bool = False


def _auto_keys(body: dict[str, Any], keys: list[str]) -> set[str]:
    raw = body.get("auto_keys")
    if raw is None:
        return set()
    if not isinstance(raw, list) or not all(isinstance(k, str) for k in raw):
        raise BadRequest("auto_keys must be a list of strings")
    given = {k.strip().lower() for k in keys}
    auto = {k.strip().lower() for k in raw}
    if not auto <= given:
        raise BadRequest("every auto key must also be in keys (with its vector)")
    return auto


def _unit_vectors(
    vectors: Any, count: int, dim: int | None, name: str = "key_vectors"
) -> np.ndarray:
    """Key vectors (field ``name``) checked (``count`` finite, non-zero rows of the graph's
    ``dim``) and scaled to unit length."""
    if not isinstance(vectors, np.ndarray) or vectors.ndim != 2 or vectors.shape[0] != count:
        raise BadRequest(f"{name} must be a float32 array of shape ({count}, dim)")
    if dim is not None and vectors.shape[1] != dim:
        raise BadRequest(
            f"key vectors have dimension {vectors.shape[1]}, this graph stores {dim}",
            {"dim": dim},
        )
    if vectors.shape[1] == 0 or not np.all(np.isfinite(vectors)):
        raise BadRequest(f"{name} must be finite and non-empty")
    norms = np.linalg.norm(vectors, axis=1)
    if np.any(norms == 0):
        raise BadRequest("a key vector is all zeros")
    unit: np.ndarray = (vectors / norms[:, None]).astype(np.float32)
    return unit


def _key_types(body: dict[str, Any]) -> dict[str, str]:
    raw = body.get("key_types")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BadRequest("key_types must be an object of key -> type")
    out: dict[str, str] = {}
    for name, kind in raw.items():
        if not isinstance(name, str) or kind not in KEY_TYPES:
            raise BadRequest(f"key_types values must be one of {', '.join(KEY_TYPES)}")
        out[name.strip()] = str(kind)
    return out


def embedded_of(body: dict[str, Any], dim: int | None) -> dict[str, np.ndarray]:
    """The vectors a write carries for key texts the graph may not hold, by stripped text, at
    unit length: ``embedded_keys`` (texts) and ``embedded_vectors`` (row i for text i), both or
    neither. A batch carries them once for all its items (``keys_of``'s ``by_text``)."""
    texts, vectors = body.get("embedded_keys"), body.get("embedded_vectors")
    if texts is None and vectors is None:
        return {}
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise BadRequest("embedded_keys must be a list of strings, with embedded_vectors")
    if len(texts) > KEYS_PER_BATCH_MAX:
        raise TooLarge(f"at most {KEYS_PER_BATCH_MAX} embedded_keys, got {len(texts)}")
    unit = _unit_vectors(vectors, len(texts), dim, "embedded_vectors")
    return {text.strip(): unit[i] for i, text in enumerate(texts)}


def vector_width(vectors: Iterable[np.ndarray]) -> int | None:
    """The width of the first vector of ``vectors`` that is not empty (None: all are, every key
    filed by its text)."""
    return next((vector.size for vector in vectors if vector.size), None)


def keys_of(
    body: dict[str, Any],
    dim: int | None,
    *,
    required: bool = True,
    by_text: Mapping[str, np.ndarray] | None = None,
) -> list[KeyInput] | None:
    """Keys with their vectors (row i of ``key_vectors`` belongs to ``keys[i]``), sanitised.

    Non-string keys and vectors that do not fit are errors; strings too short to be keys are
    dropped (as the original does), and nothing usable left is an error. ``by_text``: a body
    without ``key_vectors`` may be sent, and each key takes the vector ``by_text`` holds for
    its text (``embedded_of``), else ``UNHELD_VECTOR``, empty: it is filed by its text, which
    the graph must hold as a concept (``embedding.unheld``), and resolves by it
    (``keys.resolve_key``) without a vector being sent, fetched or read; a reader that would use
    it fails on the shape.
    """
    raw = body.get("keys")
    if raw is None and not required:
        if body.get("key_vectors") is not None:
            raise BadRequest("key_vectors given without keys")
        return None
    if not isinstance(raw, list) or not raw:
        raise BadRequest("keys must be a non-empty list of strings")
    if len(raw) > KEYS_PER_MEMORY_MAX:
        raise BadRequest(f"at most {KEYS_PER_MEMORY_MAX} keys per memory, got {len(raw)}")
    if not all(isinstance(k, str) for k in raw):
        raise BadRequest("every key must be a string")
    if any(len(k) > KEY_MAX_CHARS for k in raw):
        raise TooLarge(f"a key is longer than {KEY_MAX_CHARS} characters")
    aligned = by_text is None or "key_vectors" in body
    unit = _unit_vectors(body.get("key_vectors"), len(raw), dim) if aligned else None
    types = _key_types(body)
    auto = _auto_keys(body, raw)
    seen: set[str] = set()
    keys: list[KeyInput] = []
    for i, surface in enumerate(raw):
        clean = surface.strip()
        if not usable_key(clean) or clean.lower() in seen:
            continue
        seen.add(clean.lower())
        if unit is not None:
            vector = unit[i]
        else:
            assert by_text is not None
            vector = by_text.get(clean, UNHELD_VECTOR)
        keys.append(KeyInput(clean, vector, types.get(clean, "concept"), clean.lower() in auto))
    if not keys:
        raise BadRequest(
            "no usable key: keys need 2+ characters (or one CJK character); "
            "a keyless memory could never be recalled"
        )
    return keys
