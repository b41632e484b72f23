"""A ZeroMQ DEALER for the router's local frontend, in the standard library: the hook's client.

Why hand-written: the hook is a fresh Python process per prompt, and importing pyzmq cost it
70-140 ms of CPU on every prompt on the loaded test box (``python -X importtime -c "import
zmq"``), most of its 150 ms budget (docs/SCALING.md, "The hook's round trip"). What the hook
needs of ZeroMQ on one machine is small: connect to the router's Unix socket, the NULL security
mechanism, one DEALER exchanging multipart messages with the router's ROUTER socket. That is
ZMTP 3.0 (rfc.zeromq.org, RFC 23; 3.1, RFC 37, adds only commands a DEALER may ignore), and it
fits in this module. A router reached over tcp (another host, CURVE) keeps pyzmq's ``Client``
(protocol/client.py): CURVE is not reimplemented here.

The exchange, on a fresh connection::

    greeting  64 bytes each way: signature 0xFF ... 0x7F, version 3.0, mechanism "NULL",
              as-server 0, zero filler
    READY     a command frame each way, with the property Socket-Type (DEALER / ROUTER)
    messages  frames: a flags byte (MORE 0x01, LONG 0x02, COMMAND 0x04), the size (one
              byte, or eight big-endian when LONG), the bytes

A DEALER sends the envelope's frames as they are (protocol/envelope.py); the router's ROUTER
socket prefixes them with this connection's routing id and strips it from the reply, so the
router sees exactly what pyzmq's ``Client`` sends.

A call never outlives its deadline: connect, handshake, send and receive share one deadline
(the call's timeout plus ``REPLY_GRACE_MS``, as ``Client`` waits for the router's typed
``timeout`` reply), and each socket operation gets the time left as its timeout. The errors are
``Client``'s: a refused or dropped connection is a transient ``Unavailable`` (``retry=True``
sends the call again on a new connection, after ``RETRY_PAUSE_MS``, while time is left), no
reply in time is ``DeadlineExceeded``, a typed error from the router is raised as such, and a
peer that breaks ZMTP is an ``Unavailable`` that no retry cures.
"""

from __future__ import annotations

import _socket
import struct
import time
from pathlib import Path
from typing import Any

from keymem.protocol import envelope
from keymem.protocol.calls import (
    DEFAULT_TIMEOUT_MS,
    REPLY_GRACE_MS,
    RequestIds,
    build_request,
    connection_lost,
    result_of,
    with_retries,
)
from keymem.protocol.endpoints import EndpointError, ipc_path
from keymem.protocol.errors import DeadlineExceeded, Unavailable, transient

# The signature's padding is libzmq's (an empty routing id's length + 1); peers read only its
# first and last bytes.
SIGNATURE = b"\xff" + bytes(7) + b"\x01\x7f"
VERSION = bytes([3, 0])
MECHANISM_BYTES = 20
NULL_MECHANISM = b"NULL".ljust(MECHANISM_BYTES, b"\0")
GREETING_BYTES = 64
GREETING = (SIGNATURE + VERSION + NULL_MECHANISM + b"\0").ljust(GREETING_BYTES, b"\0")
_MECHANISM_AT = len(SIGNATURE) + len(VERSION)
MORE = 0x01
LONG = 0x02
COMMAND = 0x04
SHORT_FRAME_MAX_BYTES = 0xFF
_LONG_SIZE = struct.Struct(">Q")
_PROPERTY_SIZE = struct.Struct(">I")
READY = b"READY"
ERROR = b"ERROR"
SOCKET_TYPE = b"Socket-Type"
OWN_SOCKET_TYPE = b"DEALER"
ROUTER_SOCKET_TYPE = b"ROUTER"
# The most one reply may hold: the router refuses messages beyond 64 MiB (MAX_MESSAGE_BYTES in
# services/router/broker.py), and a reply's body is a part of one. A larger size announced by
# the peer is a broken stream, not a reply to wait for.
MAX_REPLY_BYTES = 64 << 20
MAX_FRAMES = 16  # a reply has 4 (protocol/envelope.py)
RECV_CHUNK_BYTES = 1 << 16


class ProtocolViolation(Unavailable):
    """The peer broke ZMTP (or is not a ZeroMQ socket): the connection is closed, no retry."""


def ipc_socket_path(endpoint: str) -> Path:
    path = ipc_path(endpoint)
    if path is None:
        raise EndpointError(f"the stdlib ZMTP client speaks ipc:// only, not {endpoint!r}")
    return path


def frame(data: bytes, flags: int = 0) -> bytes:
    if len(data) > SHORT_FRAME_MAX_BYTES:
        return bytes([flags | LONG]) + _LONG_SIZE.pack(len(data)) + data
    return bytes([flags, len(data)]) + data


def message(frames: list[bytes]) -> bytes:
    last = len(frames) - 1
    return b"".join(frame(data, 0 if i == last else MORE) for i, data in enumerate(frames))


def command(name: bytes, properties: dict[bytes, bytes]) -> bytes:
    body = bytes([len(name)]) + name
    for key, value in properties.items():
        body += bytes([len(key)]) + key + _PROPERTY_SIZE.pack(len(value)) + value
    return frame(body, COMMAND)


def parse_properties(data: bytes) -> dict[bytes, bytes]:
    """A READY command's metadata (after its name); ``ProtocolViolation`` when cut short."""
    properties: dict[bytes, bytes] = {}
    at = 0
    while at < len(data):
        key_end = at + 1 + data[at]
        if key_end + _PROPERTY_SIZE.size > len(data):
            raise ProtocolViolation("a READY property is cut short")
        (size,) = _PROPERTY_SIZE.unpack_from(data, key_end)
        value_at = key_end + _PROPERTY_SIZE.size
        if value_at + size > len(data):
            raise ProtocolViolation("a READY property's value is cut short")
        properties[data[at + 1 : key_end]] = data[value_at : value_at + size]
        at = value_at + size
    return properties


class Connection:
    """One ZMTP connection to a ROUTER over a Unix socket, every operation bounded by
    ``give_up`` (``time.monotonic``)."""

    def __init__(self, endpoint: str, give_up: float) -> None:
        self.endpoint = endpoint
        self.give_up = give_up  # a call moves it on for its own deadline
        self._buffer = bytearray()
        # the C module's socket: socket.py turns its constants into enums at import, a tenth
        # of the hook's imports, and the hook needs none of what it adds (docs/SCALING.md)
        self._sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            self._arm()
            self._sock.connect(str(ipc_socket_path(endpoint)))
            self._sock.sendall(GREETING + command(READY, {SOCKET_TYPE: OWN_SOCKET_TYPE}))
            self._handshake()
        except BaseException:
            self._sock.close()
            raise

    def _arm(self) -> None:
        left = self.give_up - time.monotonic()
        if left <= 0:
            raise TimeoutError
        self._sock.settimeout(left)

    def _read(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._arm()
            chunk = self._sock.recv(RECV_CHUNK_BYTES)
            if not chunk:
                raise ConnectionResetError("the router closed the connection")
            self._buffer += chunk
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def _handshake(self) -> None:
        greeting = self._read(GREETING_BYTES)
        if greeting[0] != SIGNATURE[0] or not greeting[len(SIGNATURE) - 1] & 1:
            raise ProtocolViolation(f"{self.endpoint} is not a ZeroMQ socket (no ZMTP signature)")
        if greeting[len(SIGNATURE)] < VERSION[0]:
            raise ProtocolViolation(f"{self.endpoint} speaks ZMTP {greeting[len(SIGNATURE)]}.x")
        mechanism = greeting[_MECHANISM_AT : _MECHANISM_AT + MECHANISM_BYTES]
        if mechanism != NULL_MECHANISM:
            wanted = mechanism.rstrip(bytes(1)).decode("ascii", "replace")
            raise ProtocolViolation(f"{self.endpoint} asks for the {wanted} security mechanism")
        flags, body = self._frame()
        if not flags & COMMAND:
            raise ProtocolViolation(f"{self.endpoint} sent a message before its READY")
        name, data = self._command(body)
        if name != READY:
            raise ProtocolViolation(f"{self.endpoint} sent {name!r} instead of READY")
        socket_type = parse_properties(data).get(SOCKET_TYPE)
        if socket_type != ROUTER_SOCKET_TYPE:
            raise ProtocolViolation(f"{self.endpoint} is a {socket_type!r} socket, not a ROUTER")

    def _frame(self) -> tuple[int, bytes]:
        flags = self._read(1)[0]
        if flags & ~(MORE | LONG | COMMAND):
            raise ProtocolViolation(f"{self.endpoint} sent a frame with reserved flags {flags:#x}")
        size = _LONG_SIZE.unpack(self._read(8))[0] if flags & LONG else self._read(1)[0]
        if size > MAX_REPLY_BYTES:
            raise ProtocolViolation(f"{self.endpoint} announced a {size}-byte frame")
        return flags, self._read(size)

    def _command(self, body: bytes) -> tuple[bytes, bytes]:
        if not body or 1 + body[0] > len(body):
            raise ProtocolViolation(f"{self.endpoint} sent a malformed command")
        name, data = body[1 : 1 + body[0]], body[1 + body[0] :]
        if name == ERROR:
            reason = data[1 : 1 + data[0]].decode("utf-8", "replace") if data else ""
            raise ProtocolViolation(f"{self.endpoint} refused the connection: {reason}")
        return name, data

    def send(self, frames: list[bytes]) -> None:
        self._arm()
        self._sock.sendall(message(frames))

    def receive(self) -> list[bytes]:
        """The next message; commands between messages (ZMTP 3.1's PING) are skipped."""
        frames: list[bytes] = []
        held = 0
        while True:
            flags, body = self._frame()
            if flags & COMMAND:
                if frames or flags & MORE:
                    raise ProtocolViolation(f"{self.endpoint} sent a command inside a message")
                self._command(body)
                continue
            frames.append(body)
            held += len(body)
            if len(frames) > MAX_FRAMES or held > MAX_REPLY_BYTES:
                raise ProtocolViolation(f"{self.endpoint} sent a message beyond the limits")
            if not flags & MORE:
                return frames

    def close(self) -> None:
        self._sock.close()


class IpcClient:
    """The hook's blocking client for an ``ipc://`` router: ``Client.call`` without pyzmq."""

    def __init__(self, endpoint: str, *, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        ipc_socket_path(endpoint)  # a tcp endpoint is refused here, not at the first call
        self.endpoint = endpoint
        self.timeout_ms = timeout_ms
        self._ids = RequestIds()
        self._connection: Connection | None = None

    def call(
        self,
        service: str,
        method: str,
        body: Any = None,
        *,
        timeout_ms: int | None = None,
        retry: bool = False,
    ) -> Any:
        """One request; the result, or the typed error raised (``Client.call``'s contract)."""
        timeout = self.timeout_ms if timeout_ms is None else timeout_ms
        return with_retries(
            lambda left_ms: self._attempt(service, method, body, left_ms), timeout, retry
        )

    def _attempt(self, service: str, method: str, body: Any, timeout_ms: int) -> Any:
        request = build_request(self._ids, service, method, body, timeout_ms)
        give_up = time.monotonic() + (timeout_ms + REPLY_GRACE_MS) / 1000
        try:
            if self._connection is None:
                self._connection = Connection(self.endpoint, give_up)
            connection = self._connection
            connection.give_up = give_up
            connection.send(request.frames())
            while True:
                reply = envelope.parse_reply(connection.receive())
                if reply.request_id == request.request_id:  # else a stale reply: discarded
                    return result_of(reply)
        except TimeoutError as exc:
            self.close()  # a message may be half read
            raise DeadlineExceeded(
                f"no reply from {self.endpoint} for {service}.{method} within {timeout_ms} ms"
            ) from exc
        except ProtocolViolation:
            self.close()
            raise
        except OSError as exc:  # refused (a stale socket file), reset, broken pipe
            self.close()
            if isinstance(exc, ConnectionRefusedError | FileNotFoundError):  # nobody listens
                raise transient(f"{self.endpoint} is not accepting connections: {exc}") from exc
            raise connection_lost(self.endpoint) from exc

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> IpcClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
