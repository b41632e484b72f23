"""Key-similarity thresholds for the graph: the calibrated profile of its keys' model.

Cosine thresholds are model-specific, so they come from the embedder's calibration
(services/embedder/thresholds.py, docs/CALIBRATION.md) for the model the graph's key vectors
come from (its recorded fingerprint; ``KEYMEM_KEY_PROFILE`` names another), so no request
carries thresholds. ``KEYMEM_KEY_MERGE``, ``KEYMEM_SHORT_KEY_MERGE``, ``KEYMEM_KEY_RECALL``
and ``KEYMEM_ALIAS_FLOOR`` override single values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache

from keymem.services import config as cfg
from keymem.services.config import Config
from keymem.services.embedder.thresholds import profile_for

DEFAULT_MODEL = "use-multilingual-v3"


@dataclass(frozen=True, slots=True)
class Thresholds:
    key_merge: float  # a long concept key folds into an existing one at or above this cosine
    short_key_merge: float  # the same for short keys (<= 2 words or <= 15 chars); 0 disables
    key_recall: float  # match_keys' default semantic floor; near-key hints start here
    alias_floor: float  # lowest query-key cosine a confirmed read may learn as an alias


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
    overrides: Mapping[str, float] = field(default_factory=dict)  # the operator's
    hub_min_links: int = cfg.KEY_HUB_MIN_LINKS.default

    def thresholds(self, fingerprint: str | None) -> Thresholds:
        """For key vectors of ``fingerprint`` (None: none stored yet)."""
        model = self.model or model_of(fingerprint) or DEFAULT_MODEL
        return replace(thresholds_for(model), **self.overrides)


def key_profile_of(config: Config) -> KeyProfile:
    overrides: dict[str, float] = {}
    for name, setting in OVERRIDES.items():
        value = config[setting]
        if value is not None:
            overrides[name] = value
    return KeyProfile(config[cfg.KEY_PROFILE], overrides, config[cfg.KEY_HUB_MIN_LINKS])
