"""A throwaway keymem deployment for one eval run: real supervised services in a temp home.

The eval must measure the product as users run it (supervisord, the five programs, ipc
sockets), but must never touch the user's own memories: so it gets a fresh KEYMEM_HOME under
/tmp (short, because ipc socket paths must fit in 107 bytes) and always stops what it started —
on success, on error, on Ctrl-C and on SIGTERM — and removes the home. A run killed outright
(SIGKILL, a lost terminal) cannot clean up after itself, so each home records the pid that owns
it, and the next run stops and removes every home whose owner is gone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

from keymem.services.config import HOME, TRANSPORT, Settings, load
from keymem.services.supervision import Supervision

HOME_PARENT = "/tmp"
HOME_PREFIX = "km-eval-"
STARTING = "starting keymem's services in the temporary home"
OWNER_FILE = "owner.pid"


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C while inside, so cleanup in ``finally`` blocks runs.

    Only the main thread may set handlers; elsewhere (an embedding caller) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def settings_in(home: Path) -> Settings:
    """The user's settings, but in ``home`` and over ipc: a user's KEYMEM_TRANSPORT=tcp would
    make the eval's services bind the user's own TCP port."""
    return Settings.from_config(load().replaced("keymem eval", {HOME: home, TRANSPORT: "ipc"}))


def _owner_alive(home: Path) -> bool:
    try:
        pid = int((home / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return True  # not ours to judge (being created, or not an eval home after all)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_orphans(announce: Callable[[str], None]) -> int:
    """Stop and remove the throwaway deployments of eval runs that died without cleaning up."""
    reaped = 0
    for home in Path(HOME_PARENT).glob(f"{HOME_PREFIX}*"):
        if not home.is_dir() or _owner_alive(home):
            continue
        announce(f"stopping the services of a dead eval run in {home}")
        with contextlib.suppress(Exception):  # whatever state it is in, the home goes
            Supervision(settings_in(home)).shutdown()
        shutil.rmtree(home, ignore_errors=True)
        reaped += 1
    return reaped


@contextlib.contextmanager
def temporary_deployment(
    announce: Callable[[str], None], ready_timeout_s: float | None = None
) -> Iterator[Settings]:
    """Start keymem under a fresh temporary home, yield its settings, stop it and delete it.

    ``announce`` is told the home before anything starts (logs live there while it runs).
    """
    reap_orphans(announce)
    home = Path(tempfile.mkdtemp(prefix=HOME_PREFIX, dir=HOME_PARENT))
    (home / OWNER_FILE).write_text(str(os.getpid()))
    announce(f"{STARTING} {home} ...")
    settings = settings_in(home)
    supervision = Supervision(settings)
    try:
        with sigterm_as_interrupt():
            try:
                supervision.start()
                supervision.wait_ready(ready_timeout_s)
                yield settings
            finally:
                supervision.shutdown()
    finally:
        shutil.rmtree(home, ignore_errors=True)
