"""The envelope and codec: what goes on the wire and how bad frames are refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from keymem.protocol import envelope
from keymem.protocol.client import Client
from keymem.protocol.codec import pack, unpack
from keymem.protocol.endpoints import EndpointError, ipc_endpoints, tcp_endpoints
from keymem.protocol.errors import BadRequest, NotFound, UnsupportedVersion, error_from_wire


def test_request_survives_a_round_trip_through_frames() -> None:
    request = envelope.Request(
        b"id-1", "graph", "remember", envelope.now_ms() + 500, pack({"a": 1})
    )
    parsed = envelope.parse_request(request.frames())
    assert parsed == request
    assert unpack(parsed.body) == {"a": 1}
    assert not parsed.expired()


def test_float32_arrays_travel_as_raw_bytes_and_come_back_equal() -> None:
    matrix = np.random.default_rng(7).standard_normal((3, 512)).astype(np.float32)
    packed = pack({"vectors": matrix})
    # raw float32 payload, not a list of floats (which would cost ~9 bytes per element)
    assert len(packed) < matrix.nbytes + 64
    restored = unpack(packed)["vectors"]
    assert restored.dtype == np.float32 and restored.shape == (3, 512)
    np.testing.assert_array_equal(restored, matrix)


def test_non_float32_arrays_are_refused_rather_than_silently_converted() -> None:
    with pytest.raises(BadRequest, match="float32"):
        pack({"v": np.zeros(3, dtype=np.float64)})


@pytest.mark.parametrize(
    "data", [b"\xc1", b"\x92\x01", b"\xd9\x05ab", b"\xc7\x03\x01\x02", b"\xc7\x09\x07" + b"x" * 9]
)
def test_garbage_bodies_are_bad_requests(data: bytes) -> None:
    with pytest.raises(BadRequest):
        unpack(data)


def test_a_truncated_array_extension_is_a_bad_request() -> None:
    packed = pack(np.ones((2, 4), dtype=np.float32))
    # the ext8 header declares the payload length: shrink it by 4 so a value is missing
    assert packed[0] == 0xC7
    broken = bytes([0xC7, packed[1] - 4]) + packed[2:-4]
    with pytest.raises(BadRequest, match="data bytes"):
        unpack(broken)


def test_another_protocol_version_is_a_clear_error_not_a_crash() -> None:
    frames = envelope.Request(b"x", "graph", "ping", 0, b"").frames()
    frames[0] = b"KMP\x02Q"
    with pytest.raises(UnsupportedVersion, match="v2"):
        envelope.parse_request(frames)


Q = envelope.header(envelope.REQUEST)


@pytest.mark.parametrize(
    "frames",
    [
        [],
        [b"hello"],
        [b"GET / HTTP/1.1", b"Q"],
        [Q, b"id"],
        [Q, b"", b"svc", b"m", b"\0" * 8, b""],
        [Q, b"id", b"svc", b"m", b"\0" * 3, b""],
        [Q, b"id", b"", b"m", b"\0" * 8, b""],
        [Q, b"id", b"s\xff", b"m", b"\0" * 8, b""],
        [envelope.header(envelope.REPLY), b"id", b"ok", b""],
    ],
)
def test_malformed_requests_are_bad_requests(frames: list[bytes]) -> None:
    with pytest.raises(BadRequest):
        envelope.parse_request(frames)


def test_only_well_formed_headers_have_a_kind() -> None:
    assert envelope.kind_of([Q, b"id"]) == envelope.REQUEST
    assert envelope.kind_of([b"KMP\x02Q"]) is None
    assert envelope.kind_of([b"KMP\x01"]) is None
    assert envelope.kind_of([]) is None


def test_typed_errors_rebuild_on_the_other_side() -> None:
    error = NotFound("memory m1 does not exist", {"id": "m1"})
    rebuilt = error_from_wire(error.code.value, error.to_wire())
    assert isinstance(rebuilt, NotFound)
    assert rebuilt.message == "memory m1 does not exist" and rebuilt.detail == {"id": "m1"}
    unknown = error_from_wire("weird", {"message": "?"})
    assert unknown.code.value == "internal" and "weird" in unknown.message


def test_tcp_refuses_non_loopback_hosts() -> None:
    assert tcp_endpoints("127.0.0.1", 5000).backend == "tcp://127.0.0.1:5001"
    with pytest.raises(EndpointError, match="non-loopback"):
        tcp_endpoints("0.0.0.0", 5000)


def test_ipc_paths_too_long_for_a_unix_socket_say_how_to_fix_it() -> None:
    with pytest.raises(EndpointError, match="KEYMEM_HOME"):
        ipc_endpoints(Path("/tmp") / ("x" * 120))


def test_a_client_closed_twice_is_not_an_error(tmp_path: Path) -> None:
    """A client closed by a ``with`` block and again by its owner's cleanup (or by two owners)
    must not raise on the second close, as a file would not."""
    client = Client(ipc_endpoints(tmp_path).frontend)
    client.close()
    client.close()
