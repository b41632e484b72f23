"""Concurrent ``remember`` calls of one MCP server share their trip to the graph.

A host often has several tool calls in flight at once (an assistant turn's parallel calls, an
agent saving a conversation's facts). Each ``remember`` alone costs the router, a memory
thread and the graph a request of their own; sent together they pay once. ``Remembers`` is
natural batching: a call that finds nothing on its way is sent at once, as a plain
``memory.remember`` (a lone call waits for nothing); the calls that arrive while a trip is on
its way wait for it to come back and then go together in the next one, as one
``memory.remember_each``, which answers every item on its own: its result (id, hints, dedup
verdict) or its typed error, under its own idempotency key. A call still ends by its own
deadline: it stops waiting then, whatever its trip does (as a lone call whose reply is late).
Nothing is acknowledged before the graph has logged it: each answer is the graph's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from keymem.protocol.async_client import AsyncClient
from keymem.protocol.errors import (
    DeadlineExceeded,
    InternalError,
    KeymemError,
    outcome_from_wire,
)
from keymem.protocol.limits import BATCH_MAX_ITEMS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Waiting:
    body: dict[str, Any]
    deadline: float  # time.monotonic()
    answer: asyncio.Future[Any]


class Remembers:
    """The remembers of one server process, sent one trip at a time (see the module doc)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self._queue: list[_Waiting] = []
        self._busy = False  # a trip is on its way
        self._sending: asyncio.Task[None] | None = None  # the trip of waiting calls, held

    async def remember(self, body: dict[str, Any], deadline: float) -> Any:
        """The memory service's reply to ``body`` (a ``KeymemError`` is raised), by
        ``deadline`` (``time.monotonic()``)."""
        if not self._busy:  # nothing on its way: this call is the trip, sent at once
            self._busy = True
            try:
                (outcome,) = await self._outcomes([body], deadline)
            finally:
                self._next_trip()
            if isinstance(outcome, KeymemError):
                raise outcome
            return outcome
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append(_Waiting(body, deadline, answer))
        try:
            return await asyncio.wait_for(answer, max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise DeadlineExceeded("remember was not answered within its deadline") from None

    def _next_trip(self) -> None:
        """After a trip: the calls that arrived meanwhile go in the next one, else none is
        on its way."""
        if self._queue:
            self._sending = asyncio.get_running_loop().create_task(self._send())
        else:
            self._busy, self._sending = False, None

    async def _send(self) -> None:
        """One trip with every call still waiting (up to ``BATCH_MAX_ITEMS``), then the next."""
        try:
            trip = [w for w in self._queue[:BATCH_MAX_ITEMS] if not w.answer.done()]
            del self._queue[:BATCH_MAX_ITEMS]
            if trip:
                await self._carry(trip)
        finally:
            self._next_trip()

    async def _carry(self, trip: list[_Waiting]) -> None:
        outcomes = await self._outcomes([w.body for w in trip], max(w.deadline for w in trip))
        for waiting, outcome in zip(trip, outcomes, strict=True):
            if waiting.answer.done():
                continue  # its caller stopped waiting (deadline or cancellation)
            if isinstance(outcome, KeymemError):
                waiting.answer.set_exception(outcome)
            else:
                waiting.answer.set_result(outcome)

    async def _outcomes(self, bodies: list[dict[str, Any]], deadline: float) -> list[Any]:
        """Each body's reply or typed error: one ``remember``, or one ``remember_each``."""
        left_ms = max(1, int((deadline - time.monotonic()) * 1000))
        try:
            if len(bodies) == 1:
                return [
                    await self.client.call(
                        "memory", "remember", bodies[0], timeout_ms=left_ms, retry=True
                    )
                ]
            reply = await self.client.call(
                "memory", "remember_each", {"items": bodies}, timeout_ms=left_ms, retry=True
            )
            results = reply["results"]
            if len(results) != len(bodies):
                raise ValueError(f"{len(results)} outcomes for {len(bodies)} items")
            return [outcome_from_wire(item) for item in results]
        except KeymemError as exc:
            return [exc] * len(bodies)
        except Exception as exc:  # a reply of another shape: every caller is told, none waits
            log.exception("memory.remember_each replied in an unexpected shape")
            return [InternalError(f"remember: {type(exc).__name__}: {exc}")] * len(bodies)
