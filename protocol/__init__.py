"""keymem's wire protocol: envelope, codec, typed errors, clients and the worker runtime."""

from keymem.protocol.client import Client
from keymem.protocol.envelope import PROTOCOL_VERSION
from keymem.protocol.errors import (
    BadRequest,
    Conflict,
    DeadlineExceeded,
    ErrorCode,
    Forbidden,
    InternalError,
    KeymemError,
    NotFound,
    TooLarge,
    Unavailable,
    UnsupportedVersion,
)

__all__ = [
    "PROTOCOL_VERSION",
    "BadRequest",
    "Client",
    "Conflict",
    "DeadlineExceeded",
    "ErrorCode",
    "Forbidden",
    "InternalError",
    "KeymemError",
    "NotFound",
    "TooLarge",
    "Unavailable",
    "UnsupportedVersion",
]
