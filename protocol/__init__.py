"""keymem's wire protocol: envelope, codec, typed errors, clients and the worker runtime.

The clients are imported from their modules (``keymem.protocol.client.Client``), not from the
package: the hook imports submodules of this package on every prompt and must not load pyzmq
for a local router (protocol/zmtp.py).
"""

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
