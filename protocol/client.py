"""The blocking client for the router's frontend (or a worker's direct endpoint).

A DEALER socket whose replies are matched by request id, so a reply that arrives after its
caller gave up is simply discarded (the Lazy Pirate problem of REQ sockets does not arise).
It imports only pyzmq and msgpack (not asyncio): the hook uses it.

A call never outlives its deadline, whatever dies. When the connection to the router drops
(the router was killed), the calls waiting on it end at once with a transient ``unavailable``
instead of waiting for replies that cannot come; a call made with ``retry=True`` (an
idempotent read, or a write carrying an idempotency key) is then sent again, as it is after a
transient ``unavailable`` from the router (its worker died, none is live yet), until it is
answered or its deadline passes.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import zmq

from keymem.protocol import curve, envelope
from keymem.protocol.calls import (
    DEFAULT_TIMEOUT_MS,
    REPLY_GRACE_MS,
    RequestIds,
    build_request,
    connection_lost,
    result_of,
    with_retries,
)
from keymem.protocol.errors import (
    DeadlineExceeded,
    Forbidden,
    KeymemError,
    Unavailable,
    is_transient,
)
from keymem.protocol.sockets import send_frames

# The body field that makes a write safe to send again: the graph commits a key's write once
# and answers a repeat with the first commit's result (docs/PROTOCOL.md, "Idempotent writes").
IDEMPOTENCY_KEY = "idempotency_key"


def with_idempotency_key(body: Any) -> Any:
    """``body`` with an idempotency key (the one it carries, else a new one): safe to resend."""
    if not isinstance(body, dict) or body.get(IDEMPOTENCY_KEY) is not None:
        return body
    return {**body, IDEMPOTENCY_KEY: os.urandom(16).hex()}


# What a client's socket monitor reports: the connection dropping, the router refusing its key.
WATCHED_EVENTS = int(zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_AUTH)


def connection_failed(endpoint: str, event: list[bytes]) -> KeymemError:
    """The error that ends the calls waiting on a connection when the monitor reports
    ``event``: the router refusing this host's CURVE key is final, a drop is transient."""
    # A monitor message's first frame: the event (uint16) and its value (uint32), host order.
    if int.from_bytes(event[0][:2], sys.byteorder) == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return Forbidden(
            f"{endpoint} refused this host's CURVE key (KEYMEM_CLIENT_KEY; see keymem keys list "
            "on the router's host)"
        )
    return connection_lost(endpoint)


class Client:
    """Blocking client; one socket, safe for one thread."""

    def __init__(
        self,
        endpoint: str,
        *,
        context: zmq.Context[Any] | None = None,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        keys: curve.ClientKeys | None = None,
    ) -> None:
        """``keys``: the CURVE keys to present instead of the process's (protocol/curve.py)."""
        self.endpoint = endpoint
        self.timeout_ms = timeout_ms
        self._ids = RequestIds()
        self._socket: zmq.Socket[bytes] = (context or zmq.Context.instance()).socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        # A dropped connection ends the calls waiting on it (inproc peers live in this process).
        self._monitor: zmq.Socket[bytes] | None = None
        if not endpoint.startswith("inproc://"):
            self._monitor = self._socket.get_monitor_socket(WATCHED_EVENTS)
        self._poller = zmq.Poller()
        self._poller.register(self._socket, zmq.POLLIN)
        if self._monitor is not None:
            self._poller.register(self._monitor, zmq.POLLIN)
        curve.connect(self._socket, endpoint, keys)

    def call(
        self,
        service: str,
        method: str,
        body: Any = None,
        *,
        timeout_ms: int | None = None,
        retry: bool = False,
    ) -> Any:
        """One request; the result, or the typed error raised.

        ``retry=True`` sends it again after a transient ``unavailable`` (see the module
        docstring) until the deadline: only for calls that are safe to repeat.
        """

        def attempt(timeout: int) -> Any:
            (outcome,) = self.call_many([(service, method, body)], timeout_ms=timeout)
            if isinstance(outcome, KeymemError):
                raise outcome
            return outcome

        timeout = self.timeout_ms if timeout_ms is None else timeout_ms
        return with_retries(attempt, timeout, retry)

    def call_many(
        self, calls: Sequence[tuple[str, str, Any]], *, timeout_ms: int | None = None
    ) -> list[Any]:
        """Send every ``(service, method, body)`` at once and wait for all the replies.

        This is the fan-out primitive: the requests run in parallel on their services, and the
        call takes as long as the slowest. Each item of the result is the decoded value or the
        ``KeymemError`` that request ended with; nothing is raised for one failed call.
        """
        timeout = self.timeout_ms if timeout_ms is None else timeout_ms
        requests = [build_request(self._ids, s, m, b, timeout) for s, m, b in calls]
        outcomes: dict[bytes, Any] = {}
        self._connection_failure()  # a drop before these requests is not theirs
        for request in requests:
            try:
                send_frames(self._socket, request.frames())
            except zmq.Again:
                outcomes[request.request_id] = Unavailable(
                    f"{self.endpoint} is not accepting requests (send queue full)"
                )
        waiting = {r.request_id for r in requests} - outcomes.keys()
        give_up = time.monotonic() + (timeout + REPLY_GRACE_MS) / 1000
        while waiting and (remaining := give_up - time.monotonic()) > 0:
            events = dict(self._poller.poll(int(remaining * 1000) + 1))
            if not events:
                break
            failure = self._connection_failure()
            if failure is not None:
                for request_id in waiting:
                    outcomes[request_id] = failure
                break
            if self._socket not in events:
                continue
            reply = envelope.parse_reply(self._socket.recv_multipart())
            if reply.request_id in waiting:  # else a stale reply to an abandoned call
                waiting.discard(reply.request_id)
                try:
                    outcomes[reply.request_id] = result_of(reply)
                except KeymemError as exc:
                    outcomes[reply.request_id] = exc
        waiting -= outcomes.keys()
        for request in requests:
            if request.request_id in waiting:
                outcomes[request.request_id] = DeadlineExceeded(
                    f"no reply from {self.endpoint} for {request.service}.{request.method} "
                    f"within {timeout} ms"
                )
        return [outcomes[r.request_id] for r in requests]

    def _connection_failure(self) -> KeymemError | None:
        """How the connection failed since the last look, if it did (reads pending events)."""
        failure = None
        while self._monitor is not None and self._monitor.poll(0):
            seen = connection_failed(self.endpoint, self._monitor.recv_multipart())
            if failure is None or is_transient(failure):  # a refused key outranks the drop
                failure = seen
        return failure

    def close(self) -> None:
        """Idempotent, as a file's close is: a second close is not an error."""
        if self._socket.closed:
            return
        if self._monitor is not None:
            self._socket.disable_monitor()
            self._monitor.close(linger=0)
        self._socket.close(linger=0)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
