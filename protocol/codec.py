"""msgpack bodies, with float32 arrays carried as raw bytes.

An ``numpy.ndarray`` of float32 is packed as msgpack extension type 1: one byte of rank, a
little-endian uint32 per dimension, then the array's bytes. Lists of floats would cost ~5x the
space and a Python object per element. numpy is imported only when such an extension actually
arrives, so thin clients (the hook) never pay for it.
"""

from __future__ import annotations

import struct
import sys
from typing import TYPE_CHECKING, Any

import msgpack

from keymem.protocol.errors import BadRequest

if TYPE_CHECKING:
    import numpy as np

FLOAT32_ARRAY_EXT = 1
_DIM = struct.Struct("<I")


def _encode_array(obj: Any) -> msgpack.ExtType:
    numpy = sys.modules.get("numpy")
    if numpy is None or not isinstance(obj, numpy.ndarray):
        raise TypeError(f"cannot serialise {type(obj).__name__}")
    if obj.dtype != numpy.float32:
        raise TypeError(f"only float32 arrays travel on the wire, got {obj.dtype}")
    if obj.ndim > 255:
        raise TypeError("array rank above 255")
    header = bytes([obj.ndim]) + b"".join(_DIM.pack(n) for n in obj.shape)
    data = numpy.ascontiguousarray(obj).astype("<f4", copy=False).tobytes()
    return msgpack.ExtType(FLOAT32_ARRAY_EXT, header + data)


def _decode_ext(code: int, data: bytes) -> Any:
    if code != FLOAT32_ARRAY_EXT:
        raise BadRequest(f"unknown msgpack extension type {code}")
    return decode_float32_array(data)


def decode_float32_array(data: bytes) -> np.ndarray:
    import numpy

    if not data:
        raise BadRequest("empty float32 array extension")
    ndim = data[0]
    header_len = 1 + 4 * ndim
    if len(data) < header_len:
        raise BadRequest("truncated float32 array header")
    shape = tuple(_DIM.unpack_from(data, 1 + 4 * i)[0] for i in range(ndim))
    count = 1
    for n in shape:
        count *= n
    if len(data) - header_len != 4 * count:
        raise BadRequest(f"float32 array of shape {shape} has {len(data) - header_len} data bytes")
    return numpy.frombuffer(data, dtype="<f4", offset=header_len).reshape(shape)


def pack(obj: Any) -> bytes:
    try:
        return msgpack.packb(obj, use_bin_type=True, default=_encode_array)
    except (TypeError, ValueError, OverflowError) as exc:
        raise BadRequest(f"body cannot be encoded: {exc}") from exc


def unpack(data: bytes) -> Any:
    """Decode a body; anything malformed is a ``BadRequest``, never a crash."""
    if not data:
        return None
    try:
        return msgpack.unpackb(data, raw=False, ext_hook=_decode_ext, strict_map_key=False)
    except BadRequest:
        raise
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise BadRequest(f"body is not valid msgpack: {type(exc).__name__}: {exc}") from exc
