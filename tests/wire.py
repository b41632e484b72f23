"""Sending hand-built frames to a worker's direct endpoint, for tests of malformed input."""

from __future__ import annotations

from typing import Any

import zmq

from keymem.protocol import envelope


def direct_reply(
    context: zmq.Context[Any], endpoint: str, request: envelope.Request, timeout_ms: int
) -> envelope.Reply:
    """Send ``request`` as it is (body bytes untouched) and parse the one reply."""
    sock = context.socket(zmq.DEALER)
    try:
        sock.connect(endpoint)
        sock.send_multipart(request.frames())
        assert sock.poll(timeout_ms), f"no reply from {endpoint} within {timeout_ms} ms"
        return envelope.parse_reply(sock.recv_multipart())
    finally:
        sock.close(linger=0)
