"""How fast the shared host was when a benchmark ran.

The same code's figures on this box move by half within a day (the hypervisor's share, not
keymem), so a report carries a fixed probe beside its figures. The probe sees a slower core,
not everything: on 2026-12-03 it read 0.19-0.20 s in the morning and in the afternoon, while
the 1M store's first lexicon index (memory-bound work, the same code) took 128 s and then
188-193 s. Compare runs whose probes agree, and do not read equal probes as an equal host.
"""

from __future__ import annotations

import time

HOST_LOOP_ADDS = 5_000_000  # the probe: this many integer adds in a Python loop


def host_loop_s() -> float:
    """CPU seconds of the probe's loop (lower: a faster host)."""
    started, total = time.process_time(), 0
    for i in range(HOST_LOOP_ADDS):
        total += i
    return round(time.process_time() - started, 3)
