"""A front end's access token, kept in a file of KEYMEM_HOME (0600, created on first use).

``keymem mcp --http`` and ``keymem ui`` each admit only whoever holds their token; both keep it
here. Several processes starting at once agree on one token: the file is created by linking a
finished private file into place, which never replaces one another process made meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from keymem.protocol.endpoints import private_home

TOKEN_BYTES = 32
TOKEN_FILE_MODE = 0o600
OPEN_TO_OTHERS = stat.S_IRWXG | stat.S_IRWXO


def read_or_create_token(path: Path) -> str:
    """The token in ``path``; a new random one when there is none, or when the file is open to
    other users (its token may have been read)."""
    with contextlib.suppress(FileNotFoundError):
        existing = path.read_text().strip()
        if existing and not path.stat().st_mode & OPEN_TO_OTHERS:
            return existing
        path.unlink()
    private_home(path.parent)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    fresh = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, TOKEN_FILE_MODE)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(token + "\n")
    try:
        os.link(fresh, path)
    except FileExistsError:
        return read_or_create_token(path)
    finally:
        fresh.unlink()
    return token
