"""supervisord with one change: a program that dies is restarted at once, not a second later.

supervisord reaps a dead child after its poll and restarts it in the transitions that run after
the *next* poll, whose timeout is one second; a SIGCHLD does not end that poll (Python retries
an interrupted poll). A second is a third of keymem's kill-to-answer budget
(docs/RELIABILITY.md), so this entry point wakes the poll on every signal (a wake-up pipe in
its socket map) and runs the transitions again right after a reap that found a child.
``services/supervision.py`` starts supervisord through ``python -m keymem.services.supervisord``.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from supervisor import supervisord


class _WakeUp:
    """The read end of the signal wake-up pipe, as an entry of supervisord's socket map."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def handle_read_event(self) -> None:
        try:
            os.read(self.fd, 4096)
        except BlockingIOError:
            pass

    def handle_error(self) -> None:
        pass


class PromptSupervisor(supervisord.Supervisor):  # type: ignore[misc]
    def runforever(self) -> None:
        read_fd, write_fd = os.pipe()
        for fd in (read_fd, write_fd):
            os.set_blocking(fd, False)
        socket_map: dict[int, Any] = self.options.get_socket_map()
        socket_map[read_fd] = _WakeUp(read_fd)
        previous = signal.set_wakeup_fd(write_fd)
        try:
            super().runforever()
        finally:
            signal.set_wakeup_fd(previous)
            socket_map.pop(read_fd, None)
            os.close(read_fd)
            os.close(write_fd)

    def reap(self, once: bool = False, recursionguard: int = 0) -> None:
        children = len(self.options.pidhistory)
        super().reap(once, recursionguard)
        if recursionguard == 0 and len(self.options.pidhistory) < children:
            for group in sorted(self.process_groups.values()):
                group.transition()


def main() -> None:
    supervisord.Supervisor = PromptSupervisor
    supervisord.main()


if __name__ == "__main__":
    main()
