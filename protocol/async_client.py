"""The asyncio client: many concurrent calls multiplexed over one DEALER socket."""

from __future__ import annotations

import asyncio
from typing import Any

import zmq
import zmq.asyncio

from keymem.protocol import envelope
from keymem.protocol.client import (
    DEFAULT_TIMEOUT_MS,
    REPLY_GRACE_MS,
    RequestIds,
    build_request,
    result_of,
)
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
        self._socket.connect(endpoint)
        self._waiting: dict[bytes, asyncio.Future[envelope.Reply]] = {}
        self._reader: asyncio.Task[None] | None = None

    async def call(
        self, service: str, method: str, body: Any = None, *, timeout_ms: int | None = None
    ) -> Any:
        if self._reader is None:
            self._reader = asyncio.create_task(self._read_replies())
        timeout = self.timeout_ms if timeout_ms is None else timeout_ms
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

    async def _read_replies(self) -> None:
        while True:
            frames = await self._socket.recv_multipart()
            try:
                reply = envelope.parse_reply(frames)
            except KeymemError as exc:
                for future in self._waiting.values():
                    if not future.done():
                        future.set_exception(exc)
                continue
            waiter = self._waiting.get(reply.request_id)
            if waiter is not None and not waiter.done():
                waiter.set_result(reply)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except asyncio.CancelledError:
                pass
        self._socket.close(linger=0)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
