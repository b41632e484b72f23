"""The runtime every service runs on: register with the router, serve methods by name.

One thread owns the sockets and runs handlers one at a time. That is deliberate: heartbeats
are sent from the same loop that serves requests, so a worker stuck in a GIL-holding handler
stops heartbeating and the router routes around it (libzmq's own heartbeats would keep
answering from its I/O thread and hide the hang).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zmq

from protocol import envelope
from protocol.codec import pack, unpack
from protocol.errors import BadRequest, InternalError, KeymemError
from protocol.stats import RequestStats

log = logging.getLogger("keymem.worker")

Handler = Callable[[Any], Any]
# How often the loop wakes to notice a stop request when nothing arrives.
STOP_CHECK_MS = 50
RECONNECT_DELAY_MS = 100
DEFAULT_HEARTBEAT_INTERVAL_MS = 1000
DEFAULT_HEARTBEAT_LIVENESS = 3


@dataclass(frozen=True, slots=True)
class HeartbeatPolicy:
    """Paranoid-Pirate liveness: a peer silent for ``interval_ms * liveness`` is dead."""

    interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    liveness: int = DEFAULT_HEARTBEAT_LIVENESS

    @property
    def expiry_ms(self) -> int:
        return self.interval_ms * self.liveness


DEFAULT_HEARTBEAT = HeartbeatPolicy()


@dataclass(frozen=True, slots=True)
class Method:
    handler: Handler
    # Safe to run twice: the router may retry it on another worker if this one dies.
    idempotent: bool = False


@dataclass
class Timer:
    interval_s: float
    action: Callable[[], None]
    due_at: float = 0.0


class Service:
    """A named set of methods. ``ping`` and ``stats`` are built in for every service."""

    def __init__(self, name: str, *, capacity: int = 1) -> None:
        self.name = name
        # How many requests the router may have outstanding on one worker of this service.
        self.capacity = capacity
        self.methods: dict[str, Method] = {}
        self.timers: list[Timer] = []
        self.on_stop: list[Callable[[], None]] = []

    def method(
        self, name: str | None = None, *, idempotent: bool = False
    ) -> Callable[[Handler], Handler]:
        def register(fn: Handler) -> Handler:
            self.add(name or fn.__name__, fn, idempotent=idempotent)
            return fn

        return register

    def add(self, name: str, handler: Handler, *, idempotent: bool = False) -> None:
        if name in self.methods or name in BUILTIN_METHODS:
            raise ValueError(f"{self.name}.{name} is already defined")
        self.methods[name] = Method(handler, idempotent)

    def every(self, interval_s: float, action: Callable[[], None]) -> None:
        """Run ``action`` from the serving loop about every ``interval_s`` (first run at start)."""
        self.timers.append(Timer(interval_s, action))

    def describe(self) -> dict[str, dict[str, bool]]:
        described = {name: {"idempotent": True} for name in BUILTIN_METHODS}
        described.update({n: {"idempotent": m.idempotent} for n, m in self.methods.items()})
        return described


BUILTIN_METHODS = ("ping", "stats")


class Worker:
    """Serves one ``Service`` for the router (and optionally on a direct endpoint)."""

    def __init__(
        self,
        service: Service,
        router_endpoint: str,
        *,
        context: zmq.Context[Any] | None = None,
        direct_endpoint: str | None = None,
        heartbeat: HeartbeatPolicy = DEFAULT_HEARTBEAT,
        stop: threading.Event | None = None,
    ) -> None:
        self.service = service
        self.router_endpoint = router_endpoint
        self.context = context or zmq.Context.instance()
        self.direct_endpoint = direct_endpoint
        self.heartbeat = heartbeat
        self.stop_event = stop or threading.Event()
        self.stats = RequestStats()
        self.started_at = time.time()
        self.pid = os.getpid()
        self.registrations = 0
        self._backend: zmq.Socket[bytes] | None = None
        self._direct: zmq.Socket[bytes] | None = None
        self._poller = zmq.Poller()
        self._router_seen_ms = 0
        self._next_beat_ms = 0
        self.ready = threading.Event()  # set once the sockets are up and registration is sent

    # -- lifecycle -----------------------------------------------------------------------
    def stop(self) -> None:
        self.stop_event.set()

    def run(self) -> None:
        if self.direct_endpoint is not None:
            self._direct = self.context.socket(zmq.ROUTER)
            self._direct.setsockopt(zmq.LINGER, 0)
            self._direct.bind(self.direct_endpoint)
            self.direct_endpoint = self._direct.getsockopt_string(zmq.LAST_ENDPOINT)
            self._poller.register(self._direct, zmq.POLLIN)
        self._connect()
        self.ready.set()
        try:
            while not self.stop_event.is_set():
                self._run_timers()
                timeout = max(0, min(STOP_CHECK_MS, self._next_beat_ms - envelope.now_ms()))
                events = dict(self._poller.poll(timeout))
                if self._direct is not None and self._direct in events:
                    self._drain_direct()
                if self._backend is not None and self._backend in events:
                    self._drain_backend()
                self._keep_alive()
        finally:
            self._shutdown()

    def _connect(self) -> None:
        if self._backend is not None:
            self._poller.unregister(self._backend)
            self._backend.close(linger=0)
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.router_endpoint)
        self._backend = sock
        self._poller.register(sock, zmq.POLLIN)
        ready = {
            "service": self.service.name,
            "methods": self.service.describe(),
            "capacity": self.service.capacity,
            "pid": self.pid,
            "direct": self.direct_endpoint,
            "heartbeat_ms": self.heartbeat.interval_ms,
            "started_at": self.started_at,
        }
        sock.send_multipart(envelope.control(envelope.READY, pack(ready)))
        self.registrations += 1
        now = envelope.now_ms()
        self._router_seen_ms = now
        self._next_beat_ms = now + self.heartbeat.interval_ms

    def _shutdown(self) -> None:
        if self._backend is not None:
            try:
                self._backend.send_multipart(envelope.control(envelope.GOODBYE), zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
            self._backend.close(linger=100)
        if self._direct is not None:
            self._direct.close(linger=0)
        for action in self.service.on_stop:
            try:
                action()
            except Exception:
                log.exception("%s: on_stop action failed", self.service.name)

    # -- liveness --------------------------------------------------------------------------
    def _keep_alive(self) -> None:
        now = envelope.now_ms()
        if now - self._router_seen_ms > self.heartbeat.expiry_ms:
            log.warning(
                "%s: router silent for %d ms, reconnecting",
                self.service.name,
                now - self._router_seen_ms,
            )
            time.sleep(RECONNECT_DELAY_MS / 1000)
            self._connect()
        elif now >= self._next_beat_ms:
            self._send_backend(envelope.control(envelope.HEARTBEAT, pack(self.describe_stats())))
            self._next_beat_ms = now + self.heartbeat.interval_ms

    def _run_timers(self) -> None:
        now = time.monotonic()
        for timer in self.service.timers:
            if now >= timer.due_at:
                timer.due_at = now + timer.interval_s
                try:
                    timer.action()
                except Exception:
                    log.exception("%s: periodic task failed", self.service.name)

    def describe_stats(self) -> dict[str, Any]:
        import psutil

        return {
            "service": self.service.name,
            "pid": self.pid,
            "started_at": self.started_at,
            "uptime_s": round(time.time() - self.started_at, 1),
            "rss_bytes": psutil.Process(self.pid).memory_info().rss,
            "direct": self.direct_endpoint,
            **self.stats.to_wire(),
        }

    # -- serving ---------------------------------------------------------------------------
    def _send_backend(self, frames: list[bytes]) -> None:
        assert self._backend is not None
        try:
            self._backend.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            log.warning("%s: router not accepting messages; dropped one", self.service.name)

    def _drain_backend(self) -> None:
        assert self._backend is not None
        while True:
            try:
                frames = self._backend.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._router_seen_ms = envelope.now_ms()
            kind = frames[1] if len(frames) >= 2 and frames[0] == envelope.SIGNATURE else None
            if kind == envelope.REQUEST:
                reply = self._serve(frames)
                if reply is not None:
                    self._send_backend(reply.frames())
            elif kind == envelope.GOODBYE:
                # The router does not know us (it restarted): register again.
                self._connect()
                return
            elif kind != envelope.HEARTBEAT:
                log.warning("%s: ignored malformed message from router", self.service.name)

    def _drain_direct(self) -> None:
        assert self._direct is not None
        while True:
            try:
                peer, *frames = self._direct.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except ValueError:
                continue
            reply = self._serve(frames)
            if reply is not None:
                try:
                    self._direct.send_multipart([peer, *reply.frames()], zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass

    def _serve(self, frames: list[bytes]) -> envelope.Reply | None:
        """Run one request; ``None`` when nothing can or should be answered."""
        started = time.perf_counter()
        try:
            request = envelope.parse_request(frames)
        except KeymemError as exc:
            request_id = envelope.request_id_of(frames)
            if request_id is None:
                return None
            return envelope.Reply.error(request_id, exc)
        if request.expired():
            self.stats.expired += 1
            return None
        error_code: str | None = None
        try:
            result = self._dispatch(request.method, unpack(request.body))
            reply = envelope.Reply(request.request_id, envelope.STATUS_OK, pack(result))
        except KeymemError as exc:
            error_code = exc.code.value
            reply = envelope.Reply.error(request.request_id, exc)
        except Exception as exc:
            log.exception("%s.%s failed", self.service.name, request.method)
            error_code = "internal"
            reply = envelope.Reply.error(
                request.request_id, InternalError(f"{type(exc).__name__}: {exc}")
            )
        self.stats.record((time.perf_counter() - started) * 1e6, error_code)
        return reply

    def _dispatch(self, method: str, body: Any) -> Any:
        if method == "ping":
            return {"pong": True, "service": self.service.name, "pid": self.pid}
        if method == "stats":
            return self.describe_stats()
        found = self.service.methods.get(method)
        if found is None:
            known = ", ".join(sorted(self.service.describe()))
            raise BadRequest(f"{self.service.name} has no method {method!r} (known: {known})")
        return found.handler(body)
