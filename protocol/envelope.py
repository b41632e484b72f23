"""The wire format: multipart ZeroMQ frames, independent of any socket or transport.

Every message starts with a signature frame ``b"KMP" + version`` and a one-byte kind::

    request   [SIG, b"Q", request_id, service, method, deadline_ms(u64 BE), body]
    reply     [SIG, b"R", request_id, status, body]
    ready     [SIG, b"W", body]        worker -> router: registration (msgpack map)
    heartbeat [SIG, b"H", body]        both ways; a worker's carries its stats
    goodbye   [SIG, b"D"]              either side is going away (or: "I don't know you")

``status`` is ``b"ok"`` or an error code from ``protocol.errors``; an error body is
``{"message": str, "detail"?: map}``. ``deadline_ms`` is absolute Unix time in milliseconds.
Bodies stay opaque bytes here so the router can forward them without decoding.
See docs/PROTOCOL.md for the diagram.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

from protocol.codec import pack
from protocol.errors import BadRequest, KeymemError, UnsupportedVersion

PROTOCOL_VERSION = 1
_MAGIC = b"KMP"
SIGNATURE = _MAGIC + bytes([PROTOCOL_VERSION])

REQUEST = b"Q"
REPLY = b"R"
READY = b"W"
HEARTBEAT = b"H"
GOODBYE = b"D"

STATUS_OK = b"ok"
MAX_ID_BYTES = 64
MAX_NAME_BYTES = 64
_DEADLINE = struct.Struct(">Q")


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class Request:
    request_id: bytes
    service: str
    method: str
    deadline_ms: int
    body: bytes

    def frames(self) -> list[bytes]:
        return [
            SIGNATURE,
            REQUEST,
            self.request_id,
            self.service.encode(),
            self.method.encode(),
            _DEADLINE.pack(self.deadline_ms),
            self.body,
        ]

    def expired(self, at_ms: int | None = None) -> bool:
        return (now_ms() if at_ms is None else at_ms) >= self.deadline_ms


@dataclass(frozen=True, slots=True)
class Reply:
    request_id: bytes
    status: bytes
    body: bytes

    def frames(self) -> list[bytes]:
        return [SIGNATURE, REPLY, self.request_id, self.status, self.body]

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK

    @classmethod
    def error(cls, request_id: bytes, error: KeymemError) -> Reply:
        return cls(request_id, error.code.value.encode(), pack(error.to_wire()))


def check_signature(frames: list[bytes]) -> None:
    """Raise ``BadRequest`` for foreign traffic and ``UnsupportedVersion`` for another version."""
    if len(frames) < 2:
        raise BadRequest(f"message has {len(frames)} frame(s); at least 2 expected")
    sig = frames[0]
    if len(sig) != len(SIGNATURE) or not sig.startswith(_MAGIC):
        raise BadRequest("not a keymem message (bad signature frame)")
    if sig != SIGNATURE:
        raise UnsupportedVersion(
            f"peer speaks keymem protocol v{sig[-1]}, this side speaks v{PROTOCOL_VERSION}",
            {"supported": [PROTOCOL_VERSION], "received": sig[-1]},
        )


def _name(raw: bytes, what: str) -> str:
    if not raw or len(raw) > MAX_NAME_BYTES:
        raise BadRequest(f"{what} must be 1..{MAX_NAME_BYTES} bytes")
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"{what} must be ASCII") from exc


def request_id_of(frames: list[bytes]) -> bytes | None:
    """The request id of a (possibly malformed) request, if one can be read, to address an error."""
    if len(frames) >= 3 and frames[1] == REQUEST and 0 < len(frames[2]) <= MAX_ID_BYTES:
        return frames[2]
    return None


def parse_request(frames: list[bytes]) -> Request:
    check_signature(frames)
    if frames[1] != REQUEST:
        raise BadRequest(f"expected a request, got kind {frames[1]!r}")
    if len(frames) != 7:
        raise BadRequest(f"a request has 7 frames, got {len(frames)}")
    request_id, service, method, deadline, body = frames[2:]
    if not request_id or len(request_id) > MAX_ID_BYTES:
        raise BadRequest(f"request id must be 1..{MAX_ID_BYTES} bytes")
    if len(deadline) != _DEADLINE.size:
        raise BadRequest("deadline frame must be 8 bytes (u64 big-endian ms since epoch)")
    return Request(
        request_id=request_id,
        service=_name(service, "service"),
        method=_name(method, "method"),
        deadline_ms=_DEADLINE.unpack(deadline)[0],
        body=body,
    )


def parse_reply(frames: list[bytes]) -> Reply:
    check_signature(frames)
    if frames[1] != REPLY or len(frames) != 5:
        raise BadRequest(f"malformed reply ({len(frames)} frames, kind {frames[1]!r})")
    return Reply(request_id=frames[2], status=frames[3], body=frames[4])


def control(kind: bytes, body: bytes | None = None) -> list[bytes]:
    """A ready, heartbeat or goodbye message."""
    return [SIGNATURE, kind] if body is None else [SIGNATURE, kind, body]
