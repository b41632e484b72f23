"""The asyncio client: many concurrent calls multiplexed over one DEALER socket.

Deadlines and retries work as in the blocking client (``protocol/client.py``): a dropped
connection to the router ends every waiting call at once with a transient ``unavailable``,
and a call made with ``retry=True`` is sent again after one until its deadline.

The socket is a plain pyzmq socket watched by the event loop (``add_reader`` on its file
descriptor), not a ``zmq.asyncio`` one: that wrapper keeps a future, a poller registration and
a dozen enum operations per send and per receive, ~60 µs of CPU per call of the ``keymem mcp``
process, on the path of every tool call (docs/history/write-rate-single-2026-12-03.md). A
request is sent without blocking, as the blocking client sends (a full send queue is a
transient ``unavailable``). The descriptor is edge-triggered (it signals that the socket's
events changed, not that a message waits, and only once they have been read), so each socket
is read until it is empty when it signals, when it starts being watched and after every send.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import zmq

from keymem.protocol import curve, envelope
from keymem.protocol.calls import (
    DEFAULT_TIMEOUT_MS,
    REPLY_GRACE_MS,
    RequestIds,
    build_request,
    result_of,
    retry_in_ms,
)
from keymem.protocol.client import WATCHED_EVENTS, connection_failed
from keymem.protocol.errors import DeadlineExceeded, KeymemError, Unavailable
from keymem.protocol.sockets import send_frames


class AsyncClient:
    """asyncio client: many concurrent calls multiplexed over one socket, on the event loop
    of its first call."""

    def __init__(
        self,
        endpoint: str,
        *,
        context: zmq.Context[Any] | None = None,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> None:
        self.endpoint = endpoint
        self.timeout_ms = timeout_ms
        self._ids = RequestIds()
        # The process's context, so inproc endpoints of an in-process stack are reachable.
        self._socket: zmq.Socket[bytes] = (context or zmq.Context.instance()).socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._monitor: zmq.Socket[bytes] | None = None
        if not endpoint.startswith("inproc://"):
            self._monitor = self._socket.get_monitor_socket(WATCHED_EVENTS)
        curve.connect(self._socket, endpoint)
        self._waiting: dict[bytes, asyncio.Future[envelope.Reply]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop watching the sockets

    async def call(
        self,
        service: str,
        method: str,
        body: Any = None,
        *,
        timeout_ms: int | None = None,
        retry: bool = False,
    ) -> Any:
        """One request; ``retry=True`` only for calls that are safe to repeat."""
        timeout = self.timeout_ms if timeout_ms is None else timeout_ms
        give_up = time.monotonic() + timeout / 1000
        while True:
            try:
                return await self._call_once(service, method, body, timeout)
            except KeymemError as exc:
                pause_ms = retry_in_ms(exc, retry, give_up)
                if pause_ms is None:
                    raise
            await asyncio.sleep(pause_ms / 1000)
            timeout = int((give_up - time.monotonic()) * 1000)

    async def _call_once(self, service: str, method: str, body: Any, timeout: int) -> Any:
        loop = self._watched()
        request = build_request(self._ids, service, method, body, timeout)
        future: asyncio.Future[envelope.Reply] = loop.create_future()
        self._waiting[request.request_id] = future
        try:
            try:
                send_frames(self._socket, request.frames())
            except zmq.Again:
                raise Unavailable(
                    f"{self.endpoint} is not accepting requests (send queue full)"
                ) from None
            self._read_replies()  # the send may have taken the descriptor's signal
            reply = await asyncio.wait_for(future, (timeout + REPLY_GRACE_MS) / 1000)
        except TimeoutError:
            raise DeadlineExceeded(
                f"no reply from {self.endpoint} for {service}.{method} within {timeout} ms"
            ) from None
        finally:
            self._waiting.pop(request.request_id, None)
        return result_of(reply)

    def _watched(self) -> asyncio.AbstractEventLoop:
        """The running loop, watching the socket (and its monitor) from its first call here
        on (a client used from a later loop moves to it)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._unwatch()
            self._loop = loop
            loop.add_reader(self._socket.FD, self._read_replies)
            if self._monitor is not None:
                loop.add_reader(self._monitor.FD, self._watch_connection)
                self._watch_connection()  # a descriptor signals only once its events were read
        return loop

    def _unwatch(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._socket.FD)
            if self._monitor is not None:
                self._loop.remove_reader(self._monitor.FD)
        self._loop = None

    def _fail_waiting(self, error: KeymemError) -> None:
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(error)

    def _read_replies(self) -> None:
        """Hand every reply waiting on the socket to its call."""
        while _readable(self._socket):
            frames = self._socket.recv_multipart(zmq.NOBLOCK)
            try:
                reply = envelope.parse_reply(frames)
            except KeymemError as exc:
                self._fail_waiting(exc)
                continue
            waiter = self._waiting.get(reply.request_id)
            if waiter is not None and not waiter.done():
                waiter.set_result(reply)

    def _watch_connection(self) -> None:
        """The calls in flight when the connection drops will get no reply: end them now."""
        assert self._monitor is not None
        while _readable(self._monitor):
            event = self._monitor.recv_multipart(zmq.NOBLOCK)
            self._fail_waiting(connection_failed(self.endpoint, event))

    async def close(self) -> None:
        self._unwatch()
        if self._monitor is not None:
            self._socket.disable_monitor()
            self._monitor.close(linger=0)
        self._socket.close(linger=0)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _readable(socket: zmq.Socket[bytes]) -> bool:
    """Whether a message waits on ``socket`` (reading its events also rearms its descriptor)."""
    return bool(cast(int, socket.getsockopt(zmq.EVENTS)) & zmq.POLLIN)
