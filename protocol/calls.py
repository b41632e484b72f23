"""What every blocking client does around a call, whatever carries its frames: request ids,
building a request, decoding a reply, when to send a failed call again.

Only the standard library and msgpack (through the codec) are imported: the pyzmq ``Client``
(protocol/client.py) and the hook's hand-written ipc client (protocol/zmtp.py) share it, and
the hook must not load pyzmq.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from typing import Any

from keymem.protocol import envelope
from keymem.protocol.codec import pack, unpack
from keymem.protocol.errors import (
    KeymemError,
    Unavailable,
    error_from_wire,
    is_transient,
    transient,
)

DEFAULT_TIMEOUT_MS = 5_000
# How long past its deadline a client waits for the router's own typed ``timeout`` reply.
REPLY_GRACE_MS = 250
# Between a transient failure and the retry: a restarting service needs about a second, and
# a retry that comes back ``unavailable`` at once costs a round trip of well under 1 ms.
RETRY_PAUSE_MS = 50


class RequestIds:
    def __init__(self) -> None:
        self._prefix = os.urandom(8)
        self._counter = itertools.count(1)

    def next(self) -> bytes:
        return self._prefix + next(self._counter).to_bytes(8, "big")


def build_request(
    ids: RequestIds, service: str, method: str, body: Any, timeout_ms: int
) -> envelope.Request:
    envelope.check_timeout(timeout_ms)
    return envelope.Request(
        request_id=ids.next(),
        service=service,
        method=method,
        deadline_ms=envelope.now_ms() + timeout_ms,
        body=pack(body),
    )


def connection_lost(endpoint: str) -> Unavailable:
    return transient(f"lost the connection to {endpoint} before the reply (the router went away)")


def retry_in_ms(error: KeymemError, retry: bool, give_up: float) -> int | None:
    """How long to pause before sending a failed call again, or None: raise ``error``.

    ``give_up`` is the call's deadline on the ``time.monotonic`` clock.
    """
    left_ms = (give_up - time.monotonic()) * 1000
    if retry and is_transient(error) and left_ms > 2 * RETRY_PAUSE_MS:
        return RETRY_PAUSE_MS
    return None


def with_retries(attempt: Callable[[int], Any], timeout_ms: int, retry: bool) -> Any:
    """``attempt(timeout_ms)``'s result, sent again after a transient error while ``retry``
    and the deadline allow (``retry_in_ms``): the blocking clients' one retry loop."""
    give_up = time.monotonic() + timeout_ms / 1000
    while True:
        try:
            return attempt(timeout_ms)
        except KeymemError as error:
            pause_ms = retry_in_ms(error, retry, give_up)
            if pause_ms is None:
                raise
        time.sleep(pause_ms / 1000)
        timeout_ms = int((give_up - time.monotonic()) * 1000)


def result_of(reply: envelope.Reply) -> Any:
    """The decoded result, or the typed error the peer sent, raised."""
    if reply.ok:
        return unpack(reply.body)
    try:
        body = unpack(reply.body)
    except KeymemError:
        body = None
    raise error_from_wire(reply.status.decode("ascii", "replace"), body)
