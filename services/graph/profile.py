"""Key-similarity thresholds: per embedding model, overridable by environment or request.

Cosine thresholds are model-specific (keymem-facts: a generic profile on USE-m vectors let
through 23% irrelevant pairs). The graph has no model, so it keeps one profile chosen at start
(``KEYMEM_KEY_PROFILE``, default ``usem3``) with ``KEYMEM_KEY_MERGE``, ``KEYMEM_SHORT_KEY_MERGE``,
``KEYMEM_KEY_RECALL`` and ``KEYMEM_AUTOKEY_FLOOR`` overrides; a write or match request may pass
its own values in ``thresholds`` (the router does once the embedder publishes a calibration).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from typing import Any

from protocol.errors import BadRequest

log = logging.getLogger("keymem.graph")


@dataclass(frozen=True, slots=True)
class Thresholds:
    key_merge: float  # a long concept key folds into an existing one at or above this cosine
    short_key_merge: float  # the same for short keys (<= 2 words or <= 15 chars); 0 disables
    key_recall: float  # match_keys' default semantic floor
    autokey_floor: float  # lowest query-key cosine a confirmed read may learn as an alias


# USE multilingual v3 (usem3), provisional and conservative, measured here on pairs:
# movie~film 0.94, 커피~coffee 0.92, doctor~의사 0.91, automobile~car 0.90 (synonyms) versus
# Monday~Tuesday 0.87, Agent A~Agent B 0.86, strawberry~딸기 0.82, Python~파이썬 0.70,
# apple~fruit 0.62 (distinct or only related). Merging must never join distinct concepts, so
# the bar sits above the closest distinct pair; the embedder's calibration should replace it.
PROFILES: dict[str, Thresholds] = {
    "usem3": Thresholds(key_merge=0.88, short_key_merge=0.90, key_recall=0.55, autokey_floor=0.45),
    "bge-m3": Thresholds(key_merge=0.86, short_key_merge=0.90, key_recall=0.62, autokey_floor=0.45),
}
DEFAULT_PROFILE = "usem3"
_FIELDS = ("key_merge", "short_key_merge", "key_recall", "autokey_floor")


def _env_float(name: str) -> float | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        log.warning("ignoring %s=%r: not a number", name, raw)
        return None
    return value if 0.0 <= value <= 1.0 else None


def thresholds_from_env() -> Thresholds:
    name = os.environ.get("KEYMEM_KEY_PROFILE", DEFAULT_PROFILE).strip().lower()
    base = PROFILES.get(name)
    if base is None:
        log.warning(
            "unknown key profile %r; using the conservative %s profile", name, DEFAULT_PROFILE
        )
        base = PROFILES[DEFAULT_PROFILE]
    overrides: dict[str, Any] = {}
    for field_name in _FIELDS:
        value = _env_float(f"KEYMEM_{field_name.upper()}")
        if value is not None:
            overrides[field_name] = value
    return replace(base, **overrides)


def with_overrides(base: Thresholds, raw: Any) -> Thresholds:
    """Apply a request's ``thresholds`` object; unknown names or out-of-range values are errors."""
    if raw is None:
        return base
    if not isinstance(raw, dict):
        raise BadRequest("thresholds must be an object")
    overrides: dict[str, float] = {}
    for name, value in raw.items():
        if name not in _FIELDS:
            raise BadRequest(f"unknown threshold {name!r} (known: {', '.join(_FIELDS)})")
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise BadRequest(f"threshold {name} must be a number in [0, 1]")
        overrides[name] = float(value)
    return replace(base, **overrides)
