"""``keymem-hook``: the UserPromptSubmit client (Claude Code, Codex).

Until the hook issue wires it to the router's inject path it reads and discards the host's
JSON and prints nothing, which hosts treat as "no extra context": it never blocks a prompt.
"""

from __future__ import annotations

import sys


def main() -> int:
    sys.stdin.buffer.read()
    return 0
