"""keymem's services being started (or found running) while the MCP server already answers.

A host gives an MCP server a few seconds to answer ``initialize`` (Codex 10 s by default), and a
cold start of the five services takes longer on a loaded machine. So ``keymem mcp`` answers the
handshake and ``tools/list`` at once and runs the start-up flow (``launcher.ensure_up``) in a
thread; a tool call waits for it within its own deadline (``MemoryBackend``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class StartupFailed(Exception):
    """The services could not be started; the message names what failed and its log."""


class Startup:
    """``launch`` running in a daemon thread from construction on."""

    def __init__(self, launch: Callable[[], None]) -> None:
        self.begun = time.monotonic()
        self._done: concurrent.futures.Future[None] = concurrent.futures.Future()
        threading.Thread(
            target=self._run, args=(launch,), name="keymem-startup", daemon=True
        ).start()

    def _run(self, launch: Callable[[], None]) -> None:
        try:
            launch()
        except StartupFailed as exc:
            self._done.set_exception(exc)
        except Exception as exc:
            log.exception("keymem's start-up failed unexpectedly")
            self._done.set_exception(StartupFailed(f"internal: the start-up failed: {exc!r}"))
        else:
            self._done.set_result(None)

    def elapsed_s(self) -> float:
        return time.monotonic() - self.begun

    async def wait(self, timeout_s: float) -> None:
        """Return once the services are up; raise ``StartupFailed``, or ``TimeoutError`` while
        they are still starting after ``timeout_s`` (the start-up itself goes on)."""
        # shield: a timed-out wait must not cancel the start-up's future for later callers.
        await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(self._done)), timeout_s)
