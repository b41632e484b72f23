"""The router process: the broker in the main thread, the agent API's workers beside it.

The ``memory`` service's workers are threads of this process reaching the broker over inproc
(invariant 8: the same ``Worker`` as everywhere). Their handlers mostly wait on other services,
so several threads serve concurrent agents while the GIL stays with whoever is computing; and
because they wait for seconds at a time they declare a longer liveness than model workers.
"""

from __future__ import annotations

import threading

from keymem.protocol.endpoints import inproc_endpoints
from keymem.protocol.worker import HeartbeatPolicy, Worker
from keymem.services.catalog import BUILDERS
from keymem.services.config import LEARN_TTL_S, Settings
from keymem.services.journal import Journal
from keymem.services.memory import service as memory
from keymem.services.memory.horizon import WriteHorizon
from keymem.services.memory.learning import SurfacedLog
from keymem.services.memory.warmup import Warmer
from keymem.services.router.auth import Security
from keymem.services.router.broker import Broker

MEMORY_WORKER_THREADS = 4
# Orchestration handlers wait on other services up to their caller's deadline.
ORCHESTRATION_LIVENESS = 30
JOIN_TIMEOUT_S = 5.0


def orchestration_heartbeat(settings: Settings) -> HeartbeatPolicy:
    return HeartbeatPolicy(settings.heartbeat.interval_ms, ORCHESTRATION_LIVENESS)


def run_router(settings: Settings, stop: threading.Event) -> None:
    surfaced = SurfacedLog(settings.config[LEARN_TTL_S])  # one for all workers: learning.py
    horizon = WriteHorizon()  # one for all workers: horizon.py
    journal = Journal(settings.home, "memory")  # one for all workers: services/journal.py
    local = inproc_endpoints("router")
    warmer = Warmer(local.frontend)  # one for all workers, idle between their requests: warmup.py
    broker = Broker(
        settings.endpoints.frontend,
        settings.endpoints.backend,
        heartbeat=settings.heartbeat,
        known_services=[*BUILDERS, "memory"],
        stop=stop,
        local=local,
        security=Security.of_home(settings.home) if settings.endpoints.secure else None,
    )
    threads = [
        threading.Thread(
            target=Worker(
                memory.make_service(
                    local.frontend, surfaced, horizon, settings.config, journal, warmer
                ),
                local.backend,
                heartbeat=orchestration_heartbeat(settings),
                stop=stop,
            ).run,
            name=f"memory-{i}",
            daemon=True,
        )
        for i in range(MEMORY_WORKER_THREADS)
    ]
    broker_thread = threading.Thread(target=broker.run, name="broker", daemon=True)
    broker_thread.start()
    broker.ready.wait()  # inproc needs the bind before the connects
    for thread in threads:
        thread.start()
    stop.wait()
    for thread in threads:
        thread.join(JOIN_TIMEOUT_S)
    warmer.close()
    broker_thread.join(JOIN_TIMEOUT_S)
