"""Freshness and the validity view every memory carries.

Freshness decays from ``last_confirmed_at`` (never from reads) with the memory's decay profile's
half-life; it lowers ranking but never deletes. TTL is the only automatic expiry.
"""

from __future__ import annotations

import math
from typing import Any

from keymem.store.records import MemoryRecord

SECONDS_PER_DAY = 86_400.0
HALF_LIFE_DAYS: dict[str, float] = {
    "transient": 7.0,
    "standard": 90.0,
    "stable": 365.0,
    "permanent": math.inf,
}
FRESH_MIN = 0.5
AGING_MIN = 0.125
# Ranking factors: depth 0.9 + 0.1 * depth; freshness 0.2 + 0.8 * freshness.
DEPTH_FACTOR_BASE = 0.9
DEPTH_FACTOR_SPAN = 0.1
FRESHNESS_FACTOR_BASE = 0.2
FRESHNESS_FACTOR_SPAN = 0.8


def freshness(memory: MemoryRecord, now: float) -> float:
    half_life_days = HALF_LIFE_DAYS[memory.decay_profile]
    if math.isinf(half_life_days):
        return 1.0
    age_days = max(0.0, now - memory.last_confirmed_at) / SECONDS_PER_DAY
    return float(2.0 ** (-age_days / half_life_days))


def freshness_factor(value: float) -> float:
    return FRESHNESS_FACTOR_BASE + FRESHNESS_FACTOR_SPAN * min(1.0, max(0.0, value))


def depth_factor(depth: float) -> float:
    return DEPTH_FACTOR_BASE + DEPTH_FACTOR_SPAN * depth


def status_of(value: float) -> str:
    if value >= FRESH_MIN:
        return "fresh"
    return "aging" if value >= AGING_MIN else "stale"


def validity_view(memory: MemoryRecord, now: float) -> dict[str, Any]:
    value = freshness(memory, now)
    status = status_of(value)
    return {
        "freshness": round(value, 3),
        "status": status,
        "age_days": round(max(0.0, now - memory.last_confirmed_at) / SECONDS_PER_DAY, 3),
        "last_confirmed_at": memory.last_confirmed_at,
        "confirmation_count": memory.confirmation_count,
        "decay_profile": memory.decay_profile,
        "verification_recommended": status != "fresh",
        "verification_required": status == "stale",
    }
