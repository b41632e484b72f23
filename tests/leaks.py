"""What each test file leaves behind: processes, threads, zmq sockets, file descriptors.

Why: a deployment, an in-process router or a worker that outlives its test keeps its sockets,
its threads and its processes for the rest of the run; enough of them and every later
deployment times out (zmq's context allows 1,023 sockets, the process a limited number of
descriptors), 40 tests from the one that leaked. The guard takes a census after the last
test of every file and fails that file's teardown, naming what it left, and kills the
processes it left so that the files after it run clean.

Processes are this run's when they carry ``RUN_MARK`` in their environment: the test process
sets it and every process it starts inherits it, daemonized supervisords included.
"""

from __future__ import annotations

import contextlib
import os
import resource
import threading
import uuid
from dataclasses import dataclass

import psutil
import zmq

RUN_MARK = "PYTEST_KEYMEM_RUN"
# A file may grow the process's descriptors and the shared zmq context's sockets by this much
# over the run's start in all (lazy singletons: models, the zmq context's own, duckdb);
# past it, something keeps opening without closing.
FD_GROWTH_BOUND = 200
ZMQ_SOCKET_GROWTH_BOUND = 16
# Past this share of the process's descriptor limit the run stops at once: every later test
# would time out opening a socket (what a CI run with a limit of 1,024 showed).
FD_LIMIT_SHARE = 0.5
# A leaked process gets this long to exit once killed.
KILL_WAIT_S = 5.0


@dataclass(frozen=True)
class Census:
    fds: int
    zmq_sockets: int
    threads: frozenset[threading.Thread]
    processes: tuple[psutil.Process, ...]

    def describe(self) -> str:
        return (
            f"{self.fds} fds, {self.zmq_sockets} zmq sockets, {len(self.threads)} threads, "
            f"{len(self.processes)} processes"
        )


def mark_run() -> None:
    """Mark this process's environment so that every process the run starts can be found."""
    os.environ.setdefault(RUN_MARK, uuid.uuid4().hex)


def take_census() -> Census:
    me = psutil.Process()
    return Census(
        fds=me.num_fds(),
        zmq_sockets=len(zmq.Context.instance()._sockets),
        threads=frozenset(t for t in threading.enumerate() if t.is_alive()),
        processes=tuple(_run_processes(me.pid)),
    )


def _run_processes(own_pid: int) -> list[psutil.Process]:
    """Live processes carrying this run's mark, other than this one."""
    mark = os.environ[RUN_MARK]
    found = []
    for process in psutil.process_iter(["pid", "status"]):
        if process.pid == own_pid or process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        with contextlib.suppress(psutil.Error):
            if process.environ().get(RUN_MARK) == mark:
                found.append(process)
    return found


def leaks(run_start: Census, file_start: Census, now: Census) -> list[str]:
    """What a file left (``now``, after its last test, against the census before its first
    and the run's first), one line each; empty when nothing."""
    found = [f"process {_named(p)}" for p in now.processes]
    found += [f"thread {t!r}" for t in now.threads - file_start.threads]
    # past a bound, only a file that grew the count more is named (not every file after it)
    start = run_start
    if now.fds - start.fds > FD_GROWTH_BOUND and now.fds > file_start.fds:
        found.append(f"{now.fds} fds open (the run began with {start.fds})")
    if (
        now.zmq_sockets - start.zmq_sockets > ZMQ_SOCKET_GROWTH_BOUND
        and now.zmq_sockets > file_start.zmq_sockets
    ):
        found.append(f"{now.zmq_sockets} zmq sockets open (the run began with {start.zmq_sockets})")
    return found


def exhausted(now: Census) -> str | None:
    """Why the run cannot go on (descriptors near the process's limit), or None."""
    limit, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if now.fds > FD_LIMIT_SHARE * limit:
        return f"{now.fds} fds open of a limit of {limit}: later tests could not open sockets"
    return None


def _named(process: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        return f"{process.pid} {' '.join(process.cmdline())[:160]}"
    return str(process.pid)


def kill(processes: tuple[psutil.Process, ...]) -> None:
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(processes, timeout=KILL_WAIT_S)
