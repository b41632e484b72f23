"""The wire format: multipart ZeroMQ frames, independent of any socket or transport.

Every message starts with a 5-byte header frame: ``b"KMP"``, the version byte, the kind byte::

    request   [KMP1Q, request_id, service, method, deadline_ms(u64 BE), body]
    reply     [KMP1R, request_id, status, body]
    ready     [KMP1W, body]        worker -> router: registration (msgpack map)
    heartbeat [KMP1H, body?]       both ways; a worker's carries its stats
    goodbye   [KMP1D]              either side is going away (or: "I don't know you")

Version and kind share one frame because every frame costs a send and a receive on each hop,
and the router forwards every message twice.
``status`` is ``b"ok"`` or an error code from ``protocol.errors``; an error body is
``{"message": str, "detail"?: map}``. ``deadline_ms`` is absolute Unix time in milliseconds.
Bodies stay opaque bytes here so the router can forward them without decoding. Messages are
``NamedTuple``s, not dataclasses: the hook imports this module on every prompt, and each
dataclass costs its import ~1 ms of code generation (and ``dataclasses`` brings ``inspect``).
See docs/PROTOCOL.md for the diagram.
"""

from __future__ import annotations

import struct
import time
from typing import NamedTuple

from keymem.protocol.codec import pack
from keymem.protocol.errors import BadRequest, KeymemError, UnsupportedVersion

PROTOCOL_VERSION = 1
_MAGIC = b"KMP"
_PREFIX = _MAGIC + bytes([PROTOCOL_VERSION])
HEADER_BYTES = len(_PREFIX) + 1

REQUEST = b"Q"
REPLY = b"R"
READY = b"W"
HEARTBEAT = b"H"
GOODBYE = b"D"

STATUS_OK = b"ok"
MAX_ID_BYTES = 64
MAX_NAME_BYTES = 64
# The furthest ahead a deadline may lie. A larger one is a mistake, and its wait would not fit
# a poll timeout (a C int of milliseconds).
MAX_TIMEOUT_MS = 24 * 3600 * 1000
_DEADLINE = struct.Struct(">Q")


def now_ms() -> int:
    return int(time.time() * 1000)


class Request(NamedTuple):
    request_id: bytes
    service: str
    method: str
    deadline_ms: int
    body: bytes

    def frames(self) -> list[bytes]:
        return [
            _PREFIX + REQUEST,
            self.request_id,
            self.service.encode(),
            self.method.encode(),
            _DEADLINE.pack(self.deadline_ms),
            self.body,
        ]

    def expired(self, at_ms: int | None = None) -> bool:
        return (now_ms() if at_ms is None else at_ms) >= self.deadline_ms


class Reply(NamedTuple):
    request_id: bytes
    status: bytes
    body: bytes

    def frames(self) -> list[bytes]:
        return [_PREFIX + REPLY, self.request_id, self.status, self.body]

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK

    @classmethod
    def error(cls, request_id: bytes, error: KeymemError) -> Reply:
        return cls(request_id, error.code.value.encode(), pack(error.to_wire()))


def header(kind: bytes) -> bytes:
    return _PREFIX + kind


def kind_of(frames: list[bytes]) -> bytes | None:
    """The kind byte of a well-formed message of this version, else None (cheap, no raise)."""
    if frames and len(frames[0]) == HEADER_BYTES and frames[0].startswith(_PREFIX):
        return frames[0][-1:]
    return None


def check_header(frames: list[bytes], expected: bytes) -> None:
    """Raise ``BadRequest`` for foreign traffic or another kind, ``UnsupportedVersion`` for
    another version of this protocol."""
    first = frames[0] if frames else b""
    if len(first) != HEADER_BYTES or not first.startswith(_MAGIC):
        raise BadRequest("not a keymem message (bad header frame)")
    if not first.startswith(_PREFIX):
        raise UnsupportedVersion(
            f"peer speaks keymem protocol v{first[3]}, this side speaks v{PROTOCOL_VERSION}",
            {"supported": [PROTOCOL_VERSION], "received": first[3]},
        )
    if first[-1:] != expected:
        raise BadRequest(f"expected message kind {expected!r}, got {first[-1:]!r}")


def _name(raw: bytes, what: str) -> str:
    if not raw or len(raw) > MAX_NAME_BYTES:
        raise BadRequest(f"{what} must be 1..{MAX_NAME_BYTES} bytes")
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"{what} must be ASCII") from exc


def request_id_of(frames: list[bytes]) -> bytes | None:
    """The request id of a (possibly malformed) request, if one can be read, to address an error."""
    first = frames[0] if frames else b""
    is_request = len(first) == HEADER_BYTES and first.startswith(_MAGIC) and first[-1:] == REQUEST
    if is_request and len(frames) >= 2 and 0 < len(frames[1]) <= MAX_ID_BYTES:
        return frames[1]
    return None


def parse_request(frames: list[bytes]) -> Request:
    check_header(frames, REQUEST)
    if len(frames) != 6:
        raise BadRequest(f"a request has 6 frames, got {len(frames)}")
    request_id, service, method, deadline, body = frames[1:]
    if not request_id or len(request_id) > MAX_ID_BYTES:
        raise BadRequest(f"request id must be 1..{MAX_ID_BYTES} bytes")
    if len(deadline) != _DEADLINE.size:
        raise BadRequest("deadline frame must be 8 bytes (u64 big-endian ms since epoch)")
    deadline_ms: int = _DEADLINE.unpack(deadline)[0]
    check_timeout(deadline_ms - now_ms())
    return Request(
        request_id=request_id,
        service=_name(service, "service"),
        method=_name(method, "method"),
        deadline_ms=deadline_ms,
        body=body,
    )


def check_timeout(timeout_ms: int) -> None:
    """Refuse a deadline further ahead than ``MAX_TIMEOUT_MS`` (a past one is only expired)."""
    if timeout_ms > MAX_TIMEOUT_MS:
        raise BadRequest(
            f"deadline is {timeout_ms} ms ahead; at most {MAX_TIMEOUT_MS} ms (24 h) is allowed"
        )


def parse_reply(frames: list[bytes]) -> Reply:
    check_header(frames, REPLY)
    if len(frames) != 4:
        raise BadRequest(f"a reply has 4 frames, got {len(frames)}")
    return Reply(request_id=frames[1], status=frames[2], body=frames[3])


def control(kind: bytes, body: bytes | None = None) -> list[bytes]:
    """A ready, heartbeat or goodbye message."""
    return [_PREFIX + kind] if body is None else [_PREFIX + kind, body]
