"""Cosine thresholds per embedding model: every model spreads cosines differently.

The graph and router use these to decide when two keys are the same concept (merge), when a
query reaches a key (recall), when a short key may merge (stricter: short strings collide
more), and the floor under which a query is never learned as a key's alias. A number tuned on
one model is meaningless on another (the original's generic 0.28 recall let 23% of unrelated
pairs through on USE-m vectors), so an unknown model gets a conservative fallback, marked
``calibrated: false``, and a warning.

The ``use-multilingual-v3`` profile comes from ``python -m keymem.services.embedder.calibrate``
(docs/CALIBRATION.md); bge-m3 and OpenAI profiles are the original keymem's calibrations.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

log = logging.getLogger("keymem.embedder")


@dataclass(frozen=True)
class ThresholdProfile:
    key_merge: float
    key_recall: float
    short_key_merge: float
    alias_floor: float
    calibrated: bool
    source: str

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)


PROFILES: dict[str, ThresholdProfile] = {
    # Merge sits above the near misses (월요일/화요일 0.97, Python 3.11/3.12 0.96): on USE-m no
    # cosine separates synonyms from sibling concepts, so keys merge only when nearly
    # identical, and cross-lingual synonyms (98.8% >= key_recall) meet through recall instead.
    "use-multilingual-v3": ThresholdProfile(
        key_merge=0.96,
        key_recall=0.45,
        short_key_merge=0.98,
        alias_floor=0.45,
        calibrated=True,
        source="docs/CALIBRATION.md (python -m keymem.services.embedder.calibrate)",
    ),
    "bge-m3": ThresholdProfile(
        key_merge=0.86,
        key_recall=0.62,
        short_key_merge=0.90,
        alias_floor=0.45,
        calibrated=True,
        source="original keymem bge-m3 profile",
    ),
    "text-embedding-3-small": ThresholdProfile(
        key_merge=0.85,
        key_recall=0.28,
        short_key_merge=0.90,
        alias_floor=0.45,
        calibrated=True,
        source="original keymem OpenAI profile",
    ),
}
PROFILES["text-embedding-3-large"] = PROFILES["text-embedding-3-small"]

# For a model nobody calibrated: merge almost never (a wrong merge loses a concept), recall
# only on close matches.
FALLBACK = ThresholdProfile(
    key_merge=0.92,
    key_recall=0.70,
    short_key_merge=0.95,
    alias_floor=0.60,
    calibrated=False,
    source="uncalibrated fallback: run python -m keymem.services.embedder.calibrate for this model",
)


def profile_for(model: str) -> ThresholdProfile:
    found = PROFILES.get(model)
    if found is None:
        log.warning("no calibrated thresholds for embedding model %s; using the fallback", model)
        return FALLBACK
    return found
