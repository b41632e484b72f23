"""Key-similarity thresholds for the graph: the calibrated profile of its keys' model.

Cosine thresholds are model-specific, so they come from the embedder's calibration
(services/embedder/thresholds.py, docs/CALIBRATION.md) for the model the graph's key vectors
come from (its recorded fingerprint; ``KEYMEM_KEY_PROFILE`` names another). ``KEYMEM_KEY_MERGE``,
``KEYMEM_SHORT_KEY_MERGE``, ``KEYMEM_KEY_RECALL`` and ``KEYMEM_ALIAS_FLOOR`` override single
values and win over everything else, a request's ``thresholds`` object included.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from keymem.protocol.errors import BadRequest
from keymem.services import config as cfg
from keymem.services.config import Config
from keymem.services.embedder.thresholds import profile_for

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
OVERRIDES = {
    "key_merge": cfg.KEY_MERGE,
    "short_key_merge": cfg.SHORT_KEY_MERGE,
    "key_recall": cfg.KEY_RECALL,
    "alias_floor": cfg.ALIAS_FLOOR,
}


@lru_cache(maxsize=8)  # profile_for warns once per uncalibrated model, not per request
def thresholds_for(model: str) -> Thresholds:
    profile = profile_for(model)
    return Thresholds(
        key_merge=profile.key_merge,
        short_key_merge=profile.short_key_merge,
        key_recall=profile.key_recall,
        alias_floor=profile.alias_floor,
    )


def model_of(fingerprint: str | None) -> str | None:
    """The model id in an embedder fingerprint (``backend:model:variant``)."""
    parts = (fingerprint or "").split(":", 2)
    return parts[1] if len(parts) == 3 and parts[1] else None


@dataclass(frozen=True)
class KeyProfile:
    """Which thresholds the graph applies, for the key vectors it holds."""

    model: str | None = None  # KEYMEM_KEY_PROFILE; None: the model of the keys' fingerprint
    overrides: Mapping[str, float] = field(default_factory=dict)  # the operator's, final
    hub_min_links: int = cfg.KEY_HUB_MIN_LINKS.default

    def thresholds(self, fingerprint: str | None, request: Any = None) -> Thresholds:
        """For vectors of ``fingerprint``, with a request's ``thresholds`` object applied."""
        model = self.model or model_of(fingerprint) or DEFAULT_MODEL
        return replace(with_overrides(thresholds_for(model), request), **self.overrides)


def key_profile_of(config: Config) -> KeyProfile:
    overrides: dict[str, float] = {}
    for name, setting in OVERRIDES.items():
        value = config[setting]
        if value is not None:
            overrides[name] = value
    return KeyProfile(config[cfg.KEY_PROFILE], overrides, config[cfg.KEY_HUB_MIN_LINKS])


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
