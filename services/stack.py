"""keymem in one process: the router and workers as threads over inproc sockets.

The same ``Broker`` and ``Worker`` code the supervised processes run (invariant 8); only the
endpoints differ. Tests use it, and it is the quick embedded mode. Everything shares pyzmq's
global context, so any ``Client`` made in this process (inside a service, too) reaches the
stack's inproc endpoints without being handed a context.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq

from keymem.protocol.client import Client
from keymem.protocol.curve import ClientKeys
from keymem.protocol.endpoints import Endpoints, inproc_endpoints
from keymem.protocol.worker import HeartbeatPolicy, Service, Worker
from keymem.services.config import Settings, load
from keymem.services.router import Broker
from keymem.services.router.auth import Security

START_TIMEOUT_S = 10.0


@dataclass
class RunningWorker:
    worker: Worker
    thread: threading.Thread

    def stop(self, timeout_s: float = 5.0) -> None:
        self.worker.stop()
        self.thread.join(timeout_s)


@dataclass
class InprocStack:
    heartbeat: HeartbeatPolicy = field(default_factory=HeartbeatPolicy)
    known_services: Iterable[str] = ()
    endpoints: Endpoints = field(default_factory=inproc_endpoints)
    context: zmq.Context[Any] = field(default_factory=zmq.Context.instance)
    security: Security | None = None  # CURVE tcp endpoints: the router's keys and access list

    def __post_init__(self) -> None:
        self.broker = Broker(
            self.endpoints.frontend,
            self.endpoints.backend,
            context=self.context,
            known_services=self.known_services,
            heartbeat=self.heartbeat,
            security=self.security,
        )
        self.workers: list[RunningWorker] = []
        self._clients: list[Client] = []
        self._broker_thread = threading.Thread(target=self.broker.run, name="router", daemon=True)

    def start(self) -> InprocStack:
        self._broker_thread.start()
        if not self.broker.ready.wait(START_TIMEOUT_S):
            raise RuntimeError("router thread did not start")
        return self

    def add_worker(
        self,
        service: Service,
        *,
        direct: bool = False,
        heartbeat: HeartbeatPolicy | None = None,
        keys: ClientKeys | None = None,
    ) -> RunningWorker:
        index = sum(1 for w in self.workers if w.worker.service.name == service.name)
        worker = Worker(
            service,
            self.endpoints.backend,
            context=self.context,
            direct_endpoint=self.endpoints.direct(service.name, 0, index) if direct else None,
            heartbeat=heartbeat or self.heartbeat,
            keys=keys,
        )
        thread = threading.Thread(target=worker.run, name=f"{service.name}-{index}", daemon=True)
        running = RunningWorker(worker, thread)
        # stopped with the stack also when it never registers: a worker left running
        # reconnects every heartbeat expiry for the rest of the process
        self.workers.append(running)
        thread.start()
        if not worker.ready.wait(START_TIMEOUT_S):
            raise RuntimeError(f"{service.name} worker thread did not start")
        give_up = time.monotonic() + START_TIMEOUT_S
        while worker.identity not in self.broker.workers:
            if time.monotonic() > give_up:
                raise RuntimeError(f"{service.name} worker did not register with the router")
            time.sleep(0.002)
        return running

    def settings(self, home: Path) -> Settings:
        """Settings for building a service that lives in this stack (and may call the router):
        the environment's and ``home``'s config file, read now."""
        return Settings(home, self.endpoints, self.heartbeat, load(home=home))

    def client(self, timeout_ms: int = 5_000) -> Client:
        client = Client(self.endpoints.frontend, context=self.context, timeout_ms=timeout_ms)
        self._clients.append(client)
        return client

    def stop(self) -> None:
        for client in self._clients:
            client.close()
        for running in self.workers:
            running.stop()
        self.broker.stop()
        self._broker_thread.join(5.0)

    def __enter__(self) -> InprocStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
