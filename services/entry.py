"""The entry points (``keymem``, ``keymem-hook``, ``python -m keymem.services``): each checks
the platform before it imports anything else.

keymem needs a POSIX system (unix sockets, fcntl locks, supervisord, process tables). On
another one its imports would end in a traceback; these entries say so in one sentence.
"""

from __future__ import annotations

import os
import sys

UNSUPPORTED_PLATFORM = (
    "keymem runs only on POSIX systems (Linux, macOS; on Windows, inside WSL): "
    "it needs unix sockets, fcntl locks and supervisord."
)
EXIT_UNSUPPORTED = 1


def on_posix() -> bool:
    return os.name == "posix"


def refuse(program: str) -> int:
    print(f"{program}: {UNSUPPORTED_PLATFORM}", file=sys.stderr)
    return EXIT_UNSUPPORTED


def keymem() -> int:
    """The ``keymem`` command (``keymem mcp`` included)."""
    if not on_posix():
        return refuse("keymem")
    from keymem.services.cli import main

    return main()


def keymem_hook() -> int:
    """The prompt-submit hook; the host shows a non-zero exit's sentence without blocking."""
    if not on_posix():
        return refuse("keymem-hook")
    from keymem.hooks.prompt_submit import main

    main()


def service() -> int:
    """One supervised service process."""
    if not on_posix():
        return refuse("keymem service")
    from keymem.services.serve import main

    return main()
