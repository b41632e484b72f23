"""A worker process for liveness tests: ``python -m tests.liveness_worker BACKEND INTERVAL_MS
LIVENESS`` serves ``svc`` on the router at BACKEND until SIGTERM.

A process of its own, because what it tests stops or starves a whole interpreter: a handler
that holds the GIL would freeze an in-process router too, SIGSTOP stops every thread, and a
handler spinning in Python takes the GIL from the router it is measured by whenever it can.
"""

from __future__ import annotations

import ctypes
import signal
import sys
import threading
import time
from typing import Any

from keymem.protocol.worker import HeartbeatPolicy, Service, Worker

TAG = "process"


def spin_for(seconds: float) -> None:
    """Pure-Python work on the serving thread: it takes the GIL whenever it can."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def service() -> Service:
    svc = Service("svc")
    # dlopen(NULL): the process's own symbols, libc's usleep among them. A PyDLL call keeps
    # the GIL for its whole duration, as native code that never yields does.
    libc = ctypes.PyDLL(None)

    @svc.method()
    def hold_gil(body: Any) -> str:
        libc.usleep(int(float(body) * 1e6))
        return TAG

    @svc.method(idempotent=True)
    def whoami(body: Any) -> str:
        return TAG

    @svc.method()
    def spin(body: Any) -> str:
        # the pulse gets the GIL here: this worker is hung only once past its deadline
        spin_for(float(body))
        return TAG

    @svc.method(idempotent=True)
    def sleep_idempotent(body: Any) -> str:
        time.sleep(float(body))
        return TAG

    return svc


def main() -> None:
    backend, interval_ms, liveness = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    Worker(service(), backend, heartbeat=HeartbeatPolicy(interval_ms, liveness), stop=stop).run()


if __name__ == "__main__":
    main()
