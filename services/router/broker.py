"""The router's broker: clients on the frontend, workers registered by service on the backend.

Majordomo-style, with credit: each worker declares a capacity and the broker keeps at most that
many requests outstanding on it, always choosing the least-loaded live worker. Requests that
find every worker busy wait in a per-service queue; requests for a service with no live worker
fail fast with ``unavailable``. The broker answers every request exactly once: the reply, or a
typed error when the deadline passes or the worker dies (idempotent methods are retried once on
another worker instead).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import zmq
from zmq.utils.monitor import recv_monitor_message

from keymem.protocol import curve, envelope
from keymem.protocol.codec import pack, unpack
from keymem.protocol.endpoints import Endpoints
from keymem.protocol.errors import (
    BadRequest,
    DeadlineExceeded,
    Forbidden,
    KeymemError,
    TooLarge,
    Unavailable,
    transient,
)
from keymem.protocol.sockets import send_frames
from keymem.protocol.stats import RequestStats
from keymem.protocol.worker import DEFAULT_HEARTBEAT, STOP_CHECK_MS, HeartbeatPolicy
from keymem.services.identity import this_install
from keymem.services.router import acl
from keymem.services.router.auth import KeyAuthenticator, Principal, Security

log = logging.getLogger("keymem.router")

ROUTER_SERVICE = "router"
MAX_BODY_BYTES = 16 * 1024 * 1024
# libzmq drops the connection of a peer sending more than this; bodies above MAX_BODY_BYTES
# but below it still get a typed ``too_large`` reply.
MAX_MESSAGE_BYTES = 4 * MAX_BODY_BYTES
MAX_QUEUED_PER_SERVICE = 10_000
MAX_ATTEMPTS = 2
MIN_WORKER_EXPIRY_MS = 100
MAX_WORKER_EXPIRY_MS = 120_000
MAX_DRAIN = 1000
_TOKEN = struct.Struct(">Q")
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)


@dataclass
class Pending:
    client: bytes
    request: envelope.Request
    received_at: float  # perf_counter seconds
    attempts: int = 0
    worker: bytes | None = None
    answered: bool = False


@dataclass
class WorkerRecord:
    identity: bytes
    service: str
    capacity: int
    methods: dict[str, dict[str, bool]]
    pid: int
    direct: str | None
    expires_at_ms: int
    expiry_ms: int
    in_flight: set[bytes] = field(default_factory=set)
    reported: dict[str, Any] = field(default_factory=dict)
    registered_at: float = field(default_factory=time.time)
    peer: Principal | None = None  # over CURVE: its key and address (a remote worker)


@dataclass
class ServiceRecord:
    name: str
    workers: dict[bytes, WorkerRecord] = field(default_factory=dict)
    queue: deque[bytes] = field(default_factory=deque)
    stats: RequestStats = field(default_factory=RequestStats)

    def methods(self) -> dict[str, dict[str, bool]]:
        merged: dict[str, dict[str, bool]] = {}
        for worker in self.workers.values():
            merged.update(worker.methods)
        return merged


class Broker:
    def __init__(
        self,
        frontend: str,
        backend: str,
        *,
        context: zmq.Context[Any] | None = None,
        known_services: Iterable[str] = (),
        heartbeat: HeartbeatPolicy = DEFAULT_HEARTBEAT,
        stop: threading.Event | None = None,
        local: Endpoints | None = None,
        security: Security | None = None,
    ) -> None:
        self.frontend_endpoint = frontend
        self.backend_endpoint = backend
        # Also bound on inproc endpoints, for threads of the router's own process.
        self.local = local
        # CURVE on both sockets, peers admitted by a ZAP handler, namespaces confined (acl.py).
        self.security = security
        self.context = context or zmq.Context.instance()
        self.heartbeat = heartbeat
        self.stop_event = stop or threading.Event()
        self.services: dict[str, ServiceRecord] = {n: ServiceRecord(n) for n in known_services}
        self.workers: dict[bytes, WorkerRecord] = {}
        self.pending: dict[bytes, Pending] = {}
        self.stats = RequestStats()
        self.malformed = 0
        self.started_at = time.time()
        self.identity = this_install()
        self.ready = threading.Event()
        self._deadlines: list[tuple[int, bytes]] = []
        self._tokens = itertools.count(1)
        self._next_beat_ms = 0
        # No worker expires before this (a lower bound: heartbeats only move expiries later),
        # so the broker looks for dead workers when one may be due, not only on its own beat.
        self._next_expiry_ms = 0
        self._access_generation = 0

    def stop(self) -> None:
        self.stop_event.set()

    # -- loop ----------------------------------------------------------------------------
    def run(self) -> None:
        local = self.local
        authenticator = None
        if self.security is not None:
            authenticator = KeyAuthenticator(self.context, self.security.access)
            authenticator.start_serving()
        self.frontend = self._bind(
            self.frontend_endpoint, local.frontend if local else None, curve.FRONTEND_DOMAIN
        )
        self.backend = self._bind(
            self.backend_endpoint, local.backend if local else None, curve.BACKEND_DOMAIN
        )
        poller = zmq.Poller()
        poller.register(self.frontend, zmq.POLLIN)
        poller.register(self.backend, zmq.POLLIN)
        monitor: zmq.Socket[bytes] | None = None
        if not self.backend_endpoint.startswith("inproc://"):
            monitor = self.backend.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            poller.register(monitor, zmq.POLLIN)
        self.ready.set()
        try:
            while not self.stop_event.is_set():
                events = dict(poller.poll(self._poll_timeout_ms()))
                if self.backend in events:
                    self._drain(self.backend, self._on_backend)
                if self.frontend in events:
                    self._drain(self.frontend, self._on_frontend)
                if monitor is not None and monitor in events:
                    self._on_disconnect(monitor)
                self._tick()
        finally:
            if monitor is not None:
                self.backend.disable_monitor()
                monitor.close(linger=0)
            self.frontend.close(linger=0)
            self.backend.close(linger=0)
            if authenticator is not None:
                authenticator.stop()

    def _bind(self, endpoint: str, also: str | None, domain: str) -> zmq.Socket[bytes]:
        sock = self.context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        if self.security is not None:
            curve.serve(sock, self.security.server, domain)
        sock.bind(endpoint)
        if also is not None:
            sock.bind(also)
        return sock  # type: ignore[no-any-return]

    def _poll_timeout_ms(self) -> int:
        now = envelope.now_ms()
        wake = min(self._next_beat_ms, self._next_expiry_ms + 1, now + STOP_CHECK_MS)
        if self._deadlines:
            wake = min(wake, self._deadlines[0][0])
        return max(0, wake - now)

    def _drain(self, sock: zmq.Socket[bytes], handle: Any) -> None:
        """Hand each waiting message to ``handle(sender, frames, principal)``. Under CURVE the
        first frame is received as a ``zmq.Frame``, whose properties name the sender's key."""
        access = self.security.access if self.security is not None else None
        # Checking EVENTS costs ~1.5 µs; ending the loop on a raised zmq.Again costs ~5 µs.
        for _ in range(MAX_DRAIN):  # bounded so one busy socket cannot starve the other
            if not cast(int, sock.getsockopt(_EVENTS)) & _POLLIN:
                return
            if access is None:
                frames = sock.recv_multipart()
                handle(frames[0], frames[1:], None)
                continue
            first = sock.recv(copy=False)
            rest = sock.recv_multipart() if first.more else []
            handle(first.bytes, rest, access.principal(first))

    def _tick(self) -> None:
        now = envelope.now_ms()
        while self._deadlines and self._deadlines[0][0] <= now:
            _, token = heapq.heappop(self._deadlines)
            pending = self.pending.get(token)
            if pending is not None and not pending.answered:
                self._answer_error(
                    token, DeadlineExceeded(f"no reply from {pending.request.service} in time")
                )
        if now > self._next_expiry_ms:
            self._drop_expired(now)
        if now >= self._next_beat_ms:
            self._refresh_access()
            for identity in list(self.workers):
                self._send_worker(identity, envelope.control(envelope.HEARTBEAT))
            self._next_beat_ms = now + self.heartbeat.interval_ms

    def _drop_expired(self, now: int) -> None:
        """Drop the workers silent past their expiry: one expiry after the last message, not
        up to an interval later at the broker's next beat."""
        for worker in list(self.workers.values()):
            if now > worker.expires_at_ms:
                log.warning(
                    "%s worker pid %s missed heartbeats; dropping it", worker.service, worker.pid
                )
                self._drop_worker(worker.identity, "stopped answering heartbeats")
        self._next_expiry_ms = min(
            (w.expires_at_ms for w in self.workers.values()),
            default=now + self.heartbeat.expiry_ms,
        )

    def _refresh_access(self) -> None:
        """Read access.json again if it changed; drop the workers whose key lost the right."""
        if self.security is None:
            return
        access = self.security.access
        access.refresh()  # the ZAP thread may have read the change first
        if access.generation == self._access_generation:
            return
        self._access_generation = access.generation
        for worker in list(self.workers.values()):
            if worker.peer is None:
                continue
            current = access.principal_of(worker.peer)
            if not _may_serve(current):
                log.warning("%s worker at %s: key revoked", worker.service, worker.peer.address)
                self._send_worker(worker.identity, envelope.control(envelope.GOODBYE))
                self._drop_worker(worker.identity, "lost its key")
            else:
                worker.peer = current

    # -- clients -------------------------------------------------------------------------
    def _on_frontend(self, client: bytes, frames: list[bytes], principal: Principal | None) -> None:
        received_at = time.perf_counter()
        try:
            request = envelope.parse_request(frames)
        except KeymemError as exc:
            self.malformed += 1
            request_id = envelope.request_id_of(frames)
            if request_id is not None:
                self._reply(client, envelope.Reply.error(request_id, exc))
            return
        token = _TOKEN.pack(next(self._tokens))
        self.pending[token] = Pending(client, request, received_at)
        try:
            if principal is not None:
                if principal.entry is None:
                    raise Forbidden(f"{principal.name} is no longer admitted")
                request = self.pending[token].request = acl.confine(request, principal.entry)
            self._admit(token, request)
        except KeymemError as exc:
            self._answer_error(token, exc)

    def _admit(self, token: bytes, request: envelope.Request) -> None:
        if len(request.body) > MAX_BODY_BYTES:
            raise TooLarge(f"body of {len(request.body)} bytes exceeds {MAX_BODY_BYTES}")
        if request.expired():
            raise DeadlineExceeded("deadline passed before the router received the request")
        if request.service == ROUTER_SERVICE:
            self._answer(token, envelope.STATUS_OK, pack(self._serve_self(request)))
            return
        record = self.services.get(request.service)
        if record is None:
            known = ", ".join(sorted([ROUTER_SERVICE, *self.services]))
            raise BadRequest(f"unknown service {request.service!r} (known: {known})")
        if not record.workers:
            raise transient(f"no live {request.service} worker")
        if request.method not in record.methods():
            known = ", ".join(sorted(record.methods()))
            raise BadRequest(f"{request.service} has no method {request.method!r} (known: {known})")
        heapq.heappush(self._deadlines, (request.deadline_ms, token))
        self._dispatch(token, record)

    def _dispatch(self, token: bytes, record: ServiceRecord) -> None:
        while True:
            worker = min(
                (w for w in record.workers.values() if len(w.in_flight) < w.capacity),
                key=lambda w: len(w.in_flight),
                default=None,
            )
            if worker is None:
                if not record.workers:
                    raise transient(f"no live {record.name} worker")
                if len(record.queue) >= MAX_QUEUED_PER_SERVICE:
                    raise Unavailable(f"{record.name} is overloaded ({len(record.queue)} queued)")
                record.queue.append(token)
                return
            pending = self.pending[token]
            request = pending.request
            frames = envelope.Request(
                token, request.service, request.method, request.deadline_ms, request.body
            ).frames()
            if self._send_worker(worker.identity, frames):
                pending.worker = worker.identity
                pending.attempts += 1
                worker.in_flight.add(token)
                return
            # The worker's pipe is gone: drop it (and its in-flight work) and try another.

    def _drain_queue(self, record: ServiceRecord) -> None:
        while record.queue and any(len(w.in_flight) < w.capacity for w in record.workers.values()):
            token = record.queue.popleft()
            pending = self.pending.get(token)
            if pending is None or pending.answered:
                continue
            try:
                self._dispatch(token, record)
            except KeymemError as exc:
                self._answer_error(token, exc)
        if not record.workers:
            while record.queue:
                token = record.queue.popleft()
                if token in self.pending:
                    self._answer_error(token, transient(f"no live {record.name} worker"))

    # -- workers -------------------------------------------------------------------------
    def _on_backend(
        self, identity: bytes, frames: list[bytes], principal: Principal | None
    ) -> None:
        kind = envelope.kind_of(frames)
        if kind is None:
            self.malformed += 1
            return
        worker = self.workers.get(identity)
        if worker is not None:
            worker.expires_at_ms = envelope.now_ms() + worker.expiry_ms
        if kind == envelope.REPLY:
            self._on_reply(worker, frames)
        elif kind == envelope.HEARTBEAT:
            if worker is None:
                self._send_worker(identity, envelope.control(envelope.GOODBYE))
            elif len(frames) == 2:
                try:
                    report = unpack(frames[1])
                except BadRequest:
                    report = None
                if isinstance(report, dict):
                    worker.reported = report
        elif kind == envelope.READY and len(frames) == 2:
            self._register(identity, frames[1], principal)
        elif kind == envelope.GOODBYE:
            if worker is not None:
                self._drop_worker(identity, "said goodbye")
        else:
            self.malformed += 1

    def _register(self, identity: bytes, body: bytes, principal: Principal | None) -> None:
        try:
            ready = unpack(body)
            service = str(ready["service"])
            methods = {str(k): dict(v) for k, v in dict(ready["methods"]).items()}
            capacity = max(1, int(ready.get("capacity", 1)))
            # A worker may declare its own liveness (orchestration threads that wait on other
            # services for seconds do); bounded so a bogus value cannot park a dead worker.
            expiry_ms = int(ready.get("heartbeat_ms", 0)) * int(ready.get("liveness", 0))
            if not MIN_WORKER_EXPIRY_MS <= expiry_ms <= MAX_WORKER_EXPIRY_MS:
                expiry_ms = self.heartbeat.expiry_ms
            pid = int(ready.get("pid", 0))
            direct = ready.get("direct")
        except (KeymemError, KeyError, TypeError, ValueError, AttributeError):
            self.malformed += 1
            return
        if not service or len(service) > envelope.MAX_NAME_BYTES or service == ROUTER_SERVICE:
            self.malformed += 1
            return
        if principal is not None and not _may_serve(principal):
            log.warning("refused %s worker from %s: %s", service, principal.address, principal.name)
            return
        if identity in self.workers:
            self._drop_worker(identity, "registered again")
        record = self.services.setdefault(service, ServiceRecord(service))
        worker = WorkerRecord(
            identity=identity,
            service=service,
            capacity=capacity,
            methods=methods,
            pid=pid,
            direct=str(direct) if direct else None,
            expires_at_ms=envelope.now_ms() + expiry_ms,
            expiry_ms=expiry_ms,
            peer=principal,
        )
        self.workers[identity] = worker
        record.workers[identity] = worker
        self._next_expiry_ms = min(self._next_expiry_ms, worker.expires_at_ms)
        where = f" from {principal.address} ({principal.name})" if principal else ""
        log.info("%s worker pid %s%s registered (capacity %d)", service, pid, where, capacity)
        self._drain_queue(record)

    def _on_reply(self, worker: WorkerRecord | None, frames: list[bytes]) -> None:
        try:
            reply = envelope.parse_reply(frames)
        except KeymemError:
            self.malformed += 1
            return
        token = reply.request_id
        if worker is not None:
            worker.in_flight.discard(token)
        pending = self.pending.get(token)
        if pending is not None and not pending.answered:
            self._answer(token, reply.status, reply.body)
        elif pending is not None:
            del self.pending[token]  # already answered (timed out); the late reply is dropped
        if worker is not None:
            self._drain_queue(self.services[worker.service])

    def _drop_worker(self, identity: bytes, why: str) -> None:
        worker = self.workers.pop(identity, None)
        if worker is None:
            return
        record = self.services[worker.service]
        record.workers.pop(identity, None)
        for token in list(worker.in_flight):
            pending = self.pending.get(token)
            if pending is None:
                continue
            if pending.answered:
                del self.pending[token]
                continue
            request = pending.request
            idempotent = record.methods().get(request.method, {}).get("idempotent", False)
            if idempotent and pending.attempts < MAX_ATTEMPTS and not request.expired():
                try:
                    self._dispatch(token, record)
                    continue
                except KeymemError as exc:
                    self._answer_error(token, exc)
                    continue
            self._answer_error(
                token,
                transient(
                    f"the {worker.service} worker (pid {worker.pid}) {why} "
                    "while handling this request"
                ),
            )
        self._drain_queue(record)

    def _on_disconnect(self, monitor: zmq.Socket[bytes]) -> None:
        """A worker connection closed (e.g. kill -9): find which workers are now unroutable."""
        while True:
            try:
                recv_monitor_message(monitor, zmq.NOBLOCK)
            except zmq.Again:
                break
        for identity in list(self.workers):
            self._send_worker(identity, envelope.control(envelope.HEARTBEAT))

    def _send_worker(self, identity: bytes, frames: list[bytes]) -> bool:
        try:
            send_frames(self.backend, [identity, *frames])
            return True
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                self._drop_worker(identity, "disconnected")
            else:
                log.warning("could not reach worker: %s", exc)
            return False

    # -- replies -------------------------------------------------------------------------
    def _answer(self, token: bytes, status: bytes, body: bytes) -> None:
        pending = self.pending[token]
        pending.answered = True
        if (
            pending.worker is None
            or pending.worker not in self.workers
            or (token not in self.workers[pending.worker].in_flight)
        ):
            del self.pending[token]
        micros = (time.perf_counter() - pending.received_at) * 1e6
        error_code = None if status == envelope.STATUS_OK else status.decode("ascii", "replace")
        method = pending.request.method
        self.stats.record(micros, error_code, method)
        record = self.services.get(pending.request.service)
        if record is not None:
            record.stats.record(micros, error_code, method)
        self._reply(pending.client, envelope.Reply(pending.request.request_id, status, body))

    def _answer_error(self, token: bytes, error: KeymemError) -> None:
        reply = envelope.Reply.error(token, error)
        self._answer(token, reply.status, reply.body)

    def _reply(self, client: bytes, reply: envelope.Reply) -> None:
        try:
            send_frames(self.frontend, [client, *reply.frames()])
        except zmq.ZMQError:
            pass  # the client went away; nobody is waiting for this reply

    # -- the router's own methods ----------------------------------------------------------
    def _own_methods(self) -> dict[str, Callable[[], dict[str, Any]]]:
        return {
            "ping": lambda: {"pong": True, "service": ROUTER_SERVICE, "pid": os.getpid()},
            "stats": self.describe,
            "version": lambda: {**self.identity.to_wire(), "pid": os.getpid()},
        }

    def _serve_self(self, request: envelope.Request) -> dict[str, Any]:
        methods = self._own_methods()
        if request.method not in methods:
            known = ", ".join(sorted(methods))
            raise BadRequest(f"router has no method {request.method!r} (known: {known})")
        return methods[request.method]()

    def describe(self) -> dict[str, Any]:
        import psutil

        services: dict[str, Any] = {}
        for name, record in sorted(self.services.items()):
            workers = [
                {
                    "pid": w.pid,
                    "direct": w.direct,
                    "capacity": w.capacity,
                    "in_flight": len(w.in_flight),
                    **(
                        {"address": w.peer.address, "key": w.peer.name}
                        if w.peer is not None
                        else {}
                    ),
                    **{k: v for k, v in w.reported.items() if k not in ("service", "direct")},
                }
                for w in record.workers.values()
            ]
            services[name] = {
                "workers": workers,
                "queued": len(record.queue),
                "methods": sorted(record.methods()),
                **record.stats.to_wire(),
            }
        return {
            "router": {
                "pid": os.getpid(),
                "started_at": self.started_at,
                "uptime_s": round(time.time() - self.started_at, 1),
                **self.identity.to_wire(),
                "methods": sorted(self._own_methods()),
                "rss_bytes": psutil.Process().memory_info().rss,
                "malformed": self.malformed,
                **({"refused": self.security.access.refused} if self.security is not None else {}),
                "pending": len(self.pending),
                **self.stats.to_wire(),
            },
            "services": services,
        }


def _may_serve(principal: Principal) -> bool:
    """Only a key that may use every namespace serves: a worker sees every request it gets."""
    return principal.entry is not None and principal.entry.namespaces is None
