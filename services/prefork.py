"""A service process that loads its model once and forks the worker that serves from it.

Why: a killed worker must answer again within seconds, and the lexicon's start is Kiwi's model
load (~3 s of CPU, several times that in wall time on a loaded machine), the graph's importing
duckdb, numpy and its own modules (~0.8 s of CPU, ~2 s of wall time at load 11). Here the
supervised process loads the model or libraries, then only forks and waits: the forked child
builds the rest of the service (the lexicon's index from its cache and the change feed; the
graph's file, opened only ever in a child, and its state), registers with the router and
serves. When the child dies the parent forks another at once; it shares what was loaded
copy-on-write, so it is serving in a fork's time plus its own start, and it costs a few MB
rather than a second copy of the model. The parent serves nothing and reads no input, so what
kills a worker (a request, a bug, a ``kill -9`` of the process that answers) leaves it alone.

The child stops when the parent goes away (a killed parent is restarted by supervisord, whose
new child must be the only worker). A child that keeps dying right after its fork makes the
parent exit 1, so supervisord's own restart and give-up rules apply; a child's configuration
error (exit 78) ends the parent with 78, which supervisord does not restart.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

from keymem.services.config import EXIT_SERVICE_CONFIG

log = logging.getLogger("keymem.prefork")

# A child that dies sooner than this after its fork never got to serve: a start-up failure.
QUICK_EXIT_S = 1.0
# After this many start-up failures in a row the parent exits and leaves it to supervisord.
MAX_QUICK_EXITS = 3
# How often a waiting parent looks at its stop flag (a child's death wakes it at once).
STOP_CHECK_S = 0.5
# How often a child checks that its parent is still alive.
PARENT_CHECK_S = 0.25
EXIT_STARTUP_FAILED = 1

# The worker's life in the child: serve until ``stop`` is set, return the exit code.
Work = Callable[[threading.Event], int]


def run(work: Work, stop: threading.Event) -> int:
    """Fork a child running ``work`` and fork another whenever it dies, until ``stop``.

    ``stop`` is set by this process's signal handlers; a child inherits both, so in the child
    the same handlers set the child's own copy of it."""
    child_exited = threading.Event()

    def on_child(signum: int, frame: FrameType | None) -> None:
        child_exited.set()

    signal.signal(signal.SIGCHLD, on_child)
    parent = os.getpid()
    quick_exits = 0
    while not stop.is_set():
        forked_at = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(work, stop, parent)
        code = _wait(pid, stop, child_exited)
        if stop.is_set():
            return 0
        lived_s = time.monotonic() - forked_at
        if code == EXIT_SERVICE_CONFIG:
            return code
        quick_exits = quick_exits + 1 if lived_s < QUICK_EXIT_S else 0
        if quick_exits >= MAX_QUICK_EXITS:
            log.error(
                "worker died %d times within %.0f s of its start: giving up",
                quick_exits,
                QUICK_EXIT_S,
            )
            return EXIT_STARTUP_FAILED
        log.warning("worker %d exited (%d) after %.1f s: forking another", pid, code, lived_s)
        if quick_exits:
            stop.wait(QUICK_EXIT_S)  # a start-up failure: do not spin
    return 0


def _wait(pid: int, stop: threading.Event, child_exited: threading.Event) -> int:
    """The child's exit code; once ``stop`` is set, the child is asked to stop too."""
    asked = False
    while True:
        child_exited.clear()
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if stop.is_set() and not asked:
            os.kill(pid, signal.SIGTERM)  # supervisord signals the group; a lone TERM still works
            asked = True
        child_exited.wait(STOP_CHECK_S)


def _child(work: Work, stop: threading.Event, parent: int) -> None:
    """Run ``work`` in the forked child and exit; never returns into the parent's loop."""
    code = EXIT_STARTUP_FAILED
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        threading.Thread(
            target=_stop_with_parent, args=(parent, stop), name="parent-watch", daemon=True
        ).start()
        code = work(stop)
    except BaseException:
        log.exception("worker failed")
    finally:
        # a log pipe that closed with the parent must not keep the child from exiting here
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _stop_with_parent(parent: int, stop: threading.Event) -> None:
    while not stop.wait(PARENT_CHECK_S):
        if os.getppid() != parent:
            log.warning("parent %d is gone: stopping", parent)
            stop.set()
