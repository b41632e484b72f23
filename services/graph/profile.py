"""Key-similarity thresholds for the graph: the embedder's calibrated profile, overridable.

Cosine thresholds are model-specific, so they come from the embedder's calibration
(services/embedder/thresholds.py, docs/CALIBRATION.md) for the model named by
``KEYMEM_KEY_PROFILE`` (default ``use-multilingual-v3``). ``KEYMEM_KEY_MERGE``,
``KEYMEM_SHORT_KEY_MERGE``, ``KEYMEM_KEY_RECALL`` and ``KEYMEM_ALIAS_FLOOR`` override single
values at start, and any write or match request may carry a ``thresholds`` object (the
embedder's ``ThresholdProfile.to_wire()`` shape is accepted as is) that wins for that request.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from typing import Any

from keymem.protocol.errors import BadRequest
from keymem.services.embedder.thresholds import profile_for

log = logging.getLogger("keymem.graph")

DEFAULT_MODEL = "use-multilingual-v3"
# Informational fields of the embedder's profile that a request may carry along.
IGNORED_FIELDS = ("calibrated", "source")


@dataclass(frozen=True, slots=True)
class Thresholds:
    key_merge: float  # a long concept key folds into an existing one at or above this cosine
    short_key_merge: float  # the same for short keys (<= 2 words or <= 15 chars); 0 disables
    key_recall: float  # match_keys' default semantic floor; near-key hints start here
    alias_floor: float  # lowest query-key cosine a confirmed read may learn as an alias


_FIELDS = ("key_merge", "short_key_merge", "key_recall", "alias_floor")


def thresholds_for(model: str) -> Thresholds:
    profile = profile_for(model)
    return Thresholds(
        key_merge=profile.key_merge,
        short_key_merge=profile.short_key_merge,
        key_recall=profile.key_recall,
        alias_floor=profile.alias_floor,
    )


def _env_float(name: str) -> float | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        log.warning("ignoring %s=%r: not a number", name, raw)
        return None
    if not 0.0 <= value <= 1.0:
        log.warning("ignoring %s=%r: not in [0, 1]", name, raw)
        return None
    return value


def thresholds_from_env() -> Thresholds:
    base = thresholds_for(os.environ.get("KEYMEM_KEY_PROFILE", DEFAULT_MODEL).strip())
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
        if name in IGNORED_FIELDS:
            continue
        if name not in _FIELDS:
            raise BadRequest(f"unknown threshold {name!r} (known: {', '.join(_FIELDS)})")
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise BadRequest(f"threshold {name} must be a number in [0, 1]")
        overrides[name] = float(value)
    return replace(base, **overrides)
