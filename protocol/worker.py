"""The runtime every service runs on: register with the router, serve methods by name.

One thread owns the sockets and runs handlers one at a time. Heartbeats are sent from that
serving loop and, while a handler runs, by the worker's pulse thread, which takes the backend
socket only for that handler's duration. The pulse beats only until the running request's
deadline, and only when it gets the GIL: a long handler keeps its worker alive while its caller
still waits, and a worker that is really stuck (a handler holding the GIL in native code, a
stopped or wedged process, a handler still running past its deadline) stops heartbeating, and
the router routes around it. libzmq's own heartbeats are not used: they would keep answering
from its I/O thread and hide every one of those hangs.

Batch methods (``Service.method(name, batch=True)``) exist for model services, where one call
on 32 inputs costs little more than one call on a single input. Each wake-up drains what is
already queued on a socket (bounded), groups the requests of each batch method and calls the
handler once with the list of bodies; every request still gets its own reply, its own deadline
check and its own error. There is no artificial wait: under load, requests pile up while the
previous batch runs, so batches grow exactly when they help. A service that batches should
declare ``capacity`` > 1 so the router keeps that many requests outstanding on the worker.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import zmq

from keymem.protocol import curve, envelope
from keymem.protocol.codec import pack, unpack
from keymem.protocol.errors import BadRequest, DeadlineExceeded, InternalError, KeymemError
from keymem.protocol.limits import DEFAULT_HEARTBEAT_INTERVAL_MS, DEFAULT_HEARTBEAT_LIVENESS
from keymem.protocol.sockets import send_frames
from keymem.protocol.stats import RequestStats

log = logging.getLogger("keymem.worker")

Handler = Callable[[Any], Any]
# A batch handler takes the bodies of several requests and returns one result per body, in
# order; an item that is a ``KeymemError`` instance becomes that request's error reply.
BatchHandler = Callable[[list[Any]], list[Any]]
# At most this many messages are taken off one socket per wake-up, so one busy socket cannot
# starve the other or the heartbeat.
MAX_DRAIN = 256
DEFAULT_MAX_BATCH = 64
# Bodies in one batch call, in bytes: a proxy for model work that keeps one call short.
DEFAULT_MAX_BATCH_BYTES = 256 * 1024
# How often the loop wakes to notice a stop request when nothing arrives.
STOP_CHECK_MS = 50
RECONNECT_DELAY_MS = 100


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
    # ``handler`` is a ``BatchHandler``: it takes a list of bodies and returns a list of results.
    batch: bool = False
    max_batch: int = DEFAULT_MAX_BATCH
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES

    def call_one(self, body: Any) -> Any:
        if not self.batch:
            return self.handler(body)
        (result,) = self.handler([body])
        if isinstance(result, KeymemError):
            raise result
        return result


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
        # slices of work run while no request waits (``when_idle``)
        self.idle_work: list[Callable[[], bool]] = []
        self.on_stop: list[Callable[[], None]] = []

    def method(
        self,
        name: str | None = None,
        *,
        idempotent: bool = False,
        batch: bool = False,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    ) -> Callable[[Handler], Handler]:
        """Register a handler; with ``batch=True`` it is a ``BatchHandler`` (list in, list out)."""

        def register(fn: Handler) -> Handler:
            self.add(
                name or fn.__name__,
                fn,
                idempotent=idempotent,
                batch=batch,
                max_batch=max_batch,
                max_batch_bytes=max_batch_bytes,
            )
            return fn

        return register

    def add(
        self,
        name: str,
        handler: Handler,
        *,
        idempotent: bool = False,
        batch: bool = False,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    ) -> None:
        if name in self.methods or name in BUILTIN_METHODS:
            raise ValueError(f"{self.name}.{name} is already defined")
        if max_batch < 1 or max_batch_bytes < 1:
            raise ValueError(f"{self.name}.{name}: max_batch and max_batch_bytes must be >= 1")
        self.methods[name] = Method(handler, idempotent, batch, max_batch, max_batch_bytes)

    def every(self, interval_s: float, action: Callable[[], None]) -> None:
        """Run ``action`` from the serving loop about every ``interval_s`` (first run at start)."""
        self.timers.append(Timer(interval_s, action))

    def when_idle(self, action: Callable[[], bool]) -> None:
        """Run ``action``, one slice of deferred work a call, from the serving loop again and
        again while no request waits and it answers True (more to do): a request that arrives
        waits for one slice at most, and the heartbeat for none."""
        self.idle_work.append(action)

    def describe(self) -> dict[str, dict[str, bool]]:
        described = {name: {"idempotent": True} for name in BUILTIN_METHODS}
        described.update({n: {"idempotent": m.idempotent} for n, m in self.methods.items()})
        return described


BUILTIN_METHODS = ("ping", "stats")

# The deadline of the request a handler is serving, so that a handler which calls other
# services (the router's orchestration) gives them only the time its caller has left.
_deadline_ms: ContextVar[int | None] = ContextVar("keymem_request_deadline_ms", default=None)


def remaining_ms(default_ms: int) -> int:
    """Milliseconds left before the current request's deadline (``default_ms`` outside one)."""
    deadline = _deadline_ms.get()
    if deadline is None:
        return default_ms
    return max(0, deadline - envelope.now_ms())


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
        keys: curve.ClientKeys | None = None,
    ) -> None:
        """``keys``: the CURVE keys to present instead of the process's (protocol/curve.py)."""
        self.service = service
        self.router_endpoint = router_endpoint
        self.keys = keys
        self.context = context or zmq.Context.instance()
        self.direct_endpoint = direct_endpoint
        self.heartbeat = heartbeat
        self.stop_event = stop or threading.Event()
        self.stats = RequestStats()
        self.started_at = time.time()
        self.pid = os.getpid()
        self.registrations = 0
        self.identity = b""  # the routing id of the current connection to the router
        self._backend: zmq.Socket[bytes] | None = None
        # Reports the backend connection closing (the router died): register again at once.
        self._backend_monitor: zmq.Socket[bytes] | None = None
        self._direct: zmq.Socket[bytes] | None = None
        self._poller = zmq.Poller()
        self._router_seen_ms = 0
        self._next_beat_ms = 0
        # While a handler runs: its request's deadline. The pulse thread may use the backend
        # socket only while this is set, under ``_pulse_lock`` (the serving thread clears it
        # under the lock before touching the socket again).
        self._handler_deadline_ms: int | None = None
        self._pulse_lock = threading.Lock()
        self._ended = threading.Event()
        self._pulse = threading.Thread(
            target=self._run_pulse, name=f"{service.name}-pulse", daemon=True
        )
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
        self._pulse.start()
        self.ready.set()
        try:
            while not self.stop_event.is_set():
                self._run_timers()
                self._run_idle_work()
                timeout = max(0, min(STOP_CHECK_MS, self._next_beat_ms - envelope.now_ms()))
                events = dict(self._poller.poll(timeout))
                if self._direct is not None and self._direct in events:
                    self._drain_direct()
                if self._backend is not None and self._backend in events:
                    self._drain_backend()
                if self._backend_monitor is not None and self._backend_monitor in events:
                    self._on_router_gone()
                self._keep_alive()
        finally:
            self._shutdown()

    def _connect(self) -> None:
        self._close_backend_monitor()
        if self._backend is not None:
            self._poller.unregister(self._backend)
            self._backend.close(linger=0)
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        # A fresh routing id per connection: the router can tell this registration from an
        # earlier one of the same worker whose goodbye it may not have read yet.
        self.identity = b"w" + uuid.uuid4().bytes  # ids starting with 0 are libzmq's own
        sock.setsockopt(zmq.ROUTING_ID, self.identity)
        if not self.router_endpoint.startswith("inproc://"):
            self._backend_monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            self._poller.register(self._backend_monitor, zmq.POLLIN)
        curve.connect(sock, self.router_endpoint, self.keys)
        self._backend = sock
        self._poller.register(sock, zmq.POLLIN)
        ready = {
            "service": self.service.name,
            "methods": self.service.describe(),
            "capacity": self.service.capacity,
            "pid": self.pid,
            "direct": self.direct_endpoint,
            "heartbeat_ms": self.heartbeat.interval_ms,
            "liveness": self.heartbeat.liveness,
            "started_at": self.started_at,
        }
        sock.send_multipart(envelope.control(envelope.READY, pack(ready)))
        self.registrations += 1
        now = envelope.now_ms()
        self._router_seen_ms = now
        self._next_beat_ms = now + self.heartbeat.interval_ms

    def _on_router_gone(self) -> None:
        """The router's end of the connection closed: the ready message of a fresh connection
        waits in its queue and registers this worker the moment a router binds again, instead
        of at the next heartbeat after it does."""
        assert self._backend_monitor is not None
        while self._backend_monitor.poll(0):
            self._backend_monitor.recv_multipart()
        log.info("%s: connection to the router closed; registering again", self.service.name)
        self._connect()

    def _close_backend_monitor(self) -> None:
        if self._backend_monitor is None or self._backend is None:
            return
        self._poller.unregister(self._backend_monitor)
        self._backend.disable_monitor()
        self._backend_monitor.close(linger=0)
        self._backend_monitor = None

    def _shutdown(self) -> None:
        self._ended.set()
        if self._pulse.is_alive():
            self._pulse.join()
        self._close_backend_monitor()
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
        if now - self._router_seen_ms > self.heartbeat.expiry_ms and not self._backend_pending():
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

    def _run_pulse(self) -> None:
        """Wake when the next heartbeat is due (whoever sent the last one), and send it if a
        handler runs within its deadline: a beat is never more than about one interval late,
        and an idle worker's pulse wakes once an interval."""
        interval_ms = self.heartbeat.interval_ms
        wait_ms = interval_ms
        while not self._ended.wait(wait_ms / 1000):
            with self._pulse_lock:
                now = envelope.now_ms()
                deadline_ms = self._handler_deadline_ms
                serving = deadline_ms is not None and now < deadline_ms
                if serving and now >= self._next_beat_ms:
                    self._send_backend(envelope.control(envelope.HEARTBEAT))
                    self._next_beat_ms = now + interval_ms
                due_ms = self._next_beat_ms - now
                # overdue and not ours to send (the loop is about to, or the request is past
                # its deadline): look again an interval later
                wait_ms = due_ms if due_ms > 0 else interval_ms

    def _handle(self, deadline_ms: int, call: Callable[[], Any]) -> Any:
        """Run a handler with the pulse beating for it until ``deadline_ms``."""
        with self._pulse_lock:
            self._handler_deadline_ms = deadline_ms
        try:
            return call()
        finally:
            with self._pulse_lock:
                self._handler_deadline_ms = None

    def _backend_pending(self) -> bool:
        """Messages from the router wait unread: after a long handler the router only *looks*
        silent, and reconnecting would throw its requests away."""
        assert self._backend is not None
        events = cast(int, self._backend.getsockopt(zmq.EVENTS))
        return bool(events & zmq.POLLIN)

    def _run_timers(self) -> None:
        now = time.monotonic()
        for timer in self.service.timers:
            if now >= timer.due_at:
                timer.due_at = now + timer.interval_s
                try:
                    timer.action()
                except Exception:
                    log.exception("%s: periodic task failed", self.service.name)

    def _run_idle_work(self) -> None:
        """Slices of each idle action until a request waits, the next heartbeat is due, the
        worker stops, or the action has nothing left."""
        for action in self.service.idle_work:
            while (
                envelope.now_ms() < self._next_beat_ms
                and not self.stop_event.is_set()
                and self._idle()
            ):
                try:
                    if not action():
                        break
                except Exception:
                    log.exception("%s: idle work failed", self.service.name)
                    break

    def _idle(self) -> bool:
        """Connected to the router, and no request waits on either socket."""
        if self._backend is None or self._backend_pending():
            return False
        if self._direct is None:
            return True
        return not cast(int, self._direct.getsockopt(zmq.EVENTS)) & zmq.POLLIN

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
            send_frames(self._backend, frames)
        except zmq.Again:
            log.warning("%s: router not accepting messages; dropped one", self.service.name)

    def _drain_backend(self) -> None:
        assert self._backend is not None
        incoming: list[_Incoming] = []
        for _ in range(MAX_DRAIN):
            try:
                frames = self._backend.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            self._router_seen_ms = envelope.now_ms()
            kind = envelope.kind_of(frames)
            if kind == envelope.REQUEST:
                incoming.append(_Incoming(frames, self._send_backend))
            elif kind == envelope.GOODBYE:
                # The router does not know us (it restarted): register again. What was already
                # taken off the old socket is dropped; the router answered it with an error.
                self._connect()
                return
            elif kind != envelope.HEARTBEAT:
                log.warning("%s: ignored malformed message from router", self.service.name)
        self._serve_all(incoming)

    def _drain_direct(self) -> None:
        assert self._direct is not None
        direct = self._direct
        incoming: list[_Incoming] = []
        for _ in range(MAX_DRAIN):
            try:
                peer, *frames = direct.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            except ValueError:
                continue
            incoming.append(_Incoming(frames, _direct_sender(direct, peer)))
        self._serve_all(incoming)

    def _serve_all(self, incoming: list[_Incoming]) -> None:
        """Serve what one drain took: plain requests in order, then each batch method's group."""
        groups: dict[str, list[tuple[envelope.Request, _Incoming]]] = {}
        for item in incoming:
            started = time.perf_counter()
            try:
                request = envelope.parse_request(item.frames)
            except KeymemError as exc:
                request_id = envelope.request_id_of(item.frames)
                if request_id is not None:
                    item.send(envelope.Reply.error(request_id, exc).frames())
                continue
            found = self.service.methods.get(request.method)
            if found is not None and found.batch:
                groups.setdefault(request.method, []).append((request, item))
                continue
            reply = self._serve(request, started)
            if reply is not None:
                item.send(reply.frames())
        for method_name, members in groups.items():
            method = self.service.methods[method_name]
            for chunk in _chunks(members, method.max_batch, method.max_batch_bytes):
                self._serve_batch(method_name, method, chunk)
                self._beat_if_due()

    def _beat_if_due(self) -> None:
        """Between batch calls of one long drain: keep the router convinced we are alive."""
        now = envelope.now_ms()
        if self._backend is not None and now >= self._next_beat_ms:
            self._send_backend(envelope.control(envelope.HEARTBEAT, pack(self.describe_stats())))
            self._next_beat_ms = now + self.heartbeat.interval_ms

    def _serve_batch(
        self, name: str, method: Method, members: list[tuple[envelope.Request, _Incoming]]
    ) -> None:
        """One handler call for many requests; a failing call is retried one body at a time."""
        started = time.perf_counter()
        live: list[tuple[envelope.Request, _Incoming, Any]] = []
        for request, item in members:
            if request.expired():
                self.stats.expired += 1
                item.send(_expired_reply(request).frames())
                continue
            try:
                live.append((request, item, unpack(request.body)))
            except KeymemError as exc:
                self._reply_batch_item(request, item, exc, started)
        if not live:
            return
        # the batch serves its callers until the last of them stops waiting
        deadline_ms = max(request.deadline_ms for request, _, _ in live)
        try:
            results = self._handle(deadline_ms, partial(method.handler, [b for _, _, b in live]))
            if not isinstance(results, list) or len(results) != len(live):
                raise InternalError(
                    f"{self.service.name}.{name} returned {type(results).__name__} "
                    f"for {len(live)} bodies; expected a list of {len(live)}"
                )
        except Exception:
            if len(live) == 1:
                results = [self._failure(name, sys.exc_info()[1])]
            else:
                # Isolate the culprit: every body gets its own call and its own outcome.
                for request, item, body in live:
                    try:
                        outcome: Any = self._handle(
                            request.deadline_ms, partial(method.call_one, body)
                        )
                    except Exception as exc:
                        outcome = self._failure(name, exc)
                    self._reply_batch_item(request, item, outcome, time.perf_counter())
                return
        for (request, item, _), result in zip(live, results, strict=True):
            self._reply_batch_item(request, item, result, started)

    def _failure(self, name: str, exc: BaseException | None) -> KeymemError:
        if isinstance(exc, KeymemError):
            return exc
        log.exception("%s.%s failed", self.service.name, name, exc_info=exc)
        return InternalError(f"{type(exc).__name__}: {exc}")

    def _reply_batch_item(
        self, request: envelope.Request, item: _Incoming, result: Any, started: float
    ) -> None:
        error_code: str | None = None
        if isinstance(result, KeymemError):
            error_code = result.code.value
            reply = envelope.Reply.error(request.request_id, result)
        else:
            try:
                reply = envelope.Reply(request.request_id, envelope.STATUS_OK, pack(result))
            except KeymemError as exc:
                error_code = exc.code.value
                reply = envelope.Reply.error(request.request_id, exc)
        self.stats.record((time.perf_counter() - started) * 1e6, error_code)
        item.send(reply.frames())

    def _serve(self, request: envelope.Request, started: float) -> envelope.Reply | None:
        """Run one request; a short ``timeout`` reply, unrun, when its deadline has passed."""
        if request.expired():
            self.stats.expired += 1
            return _expired_reply(request)
        error_code: str | None = None
        deadline_token = _deadline_ms.set(request.deadline_ms)
        try:
            body = unpack(request.body)
            call = partial(self._dispatch, request.method, body)
            result = self._handle(request.deadline_ms, call)
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
        finally:
            _deadline_ms.reset(deadline_token)
        self.stats.record((time.perf_counter() - started) * 1e6, error_code, request.method)
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
        return found.call_one(body)


def _expired_reply(request: envelope.Request) -> envelope.Reply:
    """The answer to a request whose deadline passed before it could run. Nobody waits for
    it (the router already answered ``timeout``, and clients discard stale replies), but the
    router counts it as in flight until a reply comes back: without one, every expired
    request would cost the worker one unit of capacity for good, and a capacity-1 worker
    (the reranker) would take no more work after its first."""
    error = DeadlineExceeded("deadline passed before the worker could start on it")
    return envelope.Reply.error(request.request_id, error)


@dataclass(frozen=True, slots=True)
class _Incoming:
    """A request's frames and how to send its reply (router socket, or a direct peer)."""

    frames: list[bytes]
    send: Callable[[list[bytes]], None]


def _direct_sender(sock: zmq.Socket[bytes], peer: bytes) -> Callable[[list[bytes]], None]:
    def send(frames: list[bytes]) -> None:
        try:
            send_frames(sock, [peer, *frames])
        except zmq.ZMQError:
            pass

    return send


def _chunks(
    members: list[tuple[envelope.Request, _Incoming]], max_count: int, max_bytes: int
) -> list[list[tuple[envelope.Request, _Incoming]]]:
    """Split one method's requests into calls of at most ``max_count`` bodies and ``max_bytes``."""
    chunks: list[list[tuple[envelope.Request, _Incoming]]] = []
    current: list[tuple[envelope.Request, _Incoming]] = []
    size = 0
    for member in members:
        body_bytes = len(member[0].body)
        if current and (len(current) >= max_count or size + body_bytes > max_bytes):
            chunks.append(current)
            current, size = [], 0
        current.append(member)
        size += body_bytes
    if current:
        chunks.append(current)
    return chunks
