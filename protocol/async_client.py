"""The asyncio client: many concurrent calls multiplexed over one DEALER socket.

Deadlines and retries work as in the blocking client (``protocol/client.py``): a dropped
connection to the router ends every waiting call at once with a transient ``unavailable``,
and a call made with ``retry=True`` is sent again after one until its deadline.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import zmq
import zmq.asyncio

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
from keymem.protocol.errors import DeadlineExceeded, KeymemError


class AsyncClient:
    """asyncio client: many concurrent calls multiplexed over one socket."""

    def __init__(
        self,
        endpoint: str,
        *,
        context: zmq.asyncio.Context | None = None,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> None:
        self.endpoint = endpoint
        self.timeout_ms = timeout_ms
        self._ids = RequestIds()
        # Shadow the global context so inproc endpoints of an in-process stack are reachable.
        context = context or zmq.asyncio.Context(zmq.Context.instance())
        self._socket = context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._monitor: zmq.asyncio.Socket | None = None
        if not endpoint.startswith("inproc://"):
            self._monitor = self._socket.get_monitor_socket(WATCHED_EVENTS)
        curve.connect(self._socket, endpoint)
        self._waiting: dict[bytes, asyncio.Future[envelope.Reply]] = {}
        self._tasks: list[asyncio.Task[None]] = []

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
        if not self._tasks:
            self._tasks.append(asyncio.create_task(self._read_replies()))
            if self._monitor is not None:
                self._tasks.append(asyncio.create_task(self._watch_connection(self._monitor)))
        request = build_request(self._ids, service, method, body, timeout)
        future: asyncio.Future[envelope.Reply] = asyncio.get_running_loop().create_future()
        self._waiting[request.request_id] = future
        try:
            await self._socket.send_multipart(request.frames())
            reply = await asyncio.wait_for(future, (timeout + REPLY_GRACE_MS) / 1000)
        except TimeoutError:
            raise DeadlineExceeded(
                f"no reply from {self.endpoint} for {service}.{method} within {timeout} ms"
            ) from None
        finally:
            self._waiting.pop(request.request_id, None)
        return result_of(reply)

    def _fail_waiting(self, error: KeymemError) -> None:
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(error)

    async def _read_replies(self) -> None:
        while True:
            frames = await self._socket.recv_multipart()
            try:
                reply = envelope.parse_reply(frames)
            except KeymemError as exc:
                self._fail_waiting(exc)
                continue
            waiter = self._waiting.get(reply.request_id)
            if waiter is not None and not waiter.done():
                waiter.set_result(reply)

    async def _watch_connection(self, monitor: zmq.asyncio.Socket) -> None:
        """The calls in flight when the connection drops will get no reply: end them now."""
        while True:
            self._fail_waiting(connection_failed(self.endpoint, await monitor.recv_multipart()))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        if self._monitor is not None:
            self._socket.disable_monitor()
            self._monitor.close(linger=0)
        self._socket.close(linger=0)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
