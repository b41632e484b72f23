"""Drive supervisord: render its config, start it once, read process state, shut it down.

supervisord owns the five programs as one group; we talk to it over XML-RPC on a unix socket
inside the 0700 run directory. The generated config carries the launcher's effective settings
(every one a service reads) in supervisord's ``environment``, so the services run with what
the launcher saw, not with whatever environment supervisord happened to inherit; a later
launcher compares its own settings with those (``Supervision.differences``).
"""

from __future__ import annotations

import configparser
import contextlib
import fcntl
import math
import os
import signal
import string
import subprocess
import sys
import time
import xmlrpc.client
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.endpoints import prepare_run_dir, private_home
from keymem.protocol.errors import KeymemError
from keymem.services.catalog import (
    DEFAULT_STOP_WAIT_S,
    PROGRAM_ENVIRONMENT,
    STOP_WAIT_S,
    placement,
    stop_wait_s,
)
from keymem.services.config import (
    ALL_PROGRAMS,
    REGISTRY,
    TRANSPORT,
    UP_TIMEOUT_S,
    Config,
    ConfigError,
    Settings,
)

GROUP = "keymem"
SUPERVISOR_START_TIMEOUT_S = 15.0
PING_TIMEOUT_MS = 500
# `keymem down` waits for the slowest program's stop (supervisord kills it past its own
# stopwaitsecs), then for supervisord itself to exit.
SUPERVISORD_EXIT_S = 10.0
SHUTDOWN_TIMEOUT_S = max(DEFAULT_STOP_WAIT_S, *STOP_WAIT_S.values()) + SUPERVISORD_EXIT_S
STOP_POLL_S = 0.1
STOPPED_STATES = ("STOPPED", "EXITED", "FATAL", "UNKNOWN")
LOG_TAIL_LINES = 8
# supervisord states in which a program will not come up without help: FATAL (it kept dying
# during start-up) and EXITED (it exited with an expected code: 78, a configuration error).
GAVE_UP_STATES = ("FATAL", "EXITED")


class SupervisionError(RuntimeError):
    """keymem's services could not be started, reached or stopped; the message says why."""


@dataclass(frozen=True)
class Difference:
    """A setting the running services read with another value than this launcher's."""

    name: str
    running: str | None  # None: the running services predate the setting
    here: str
    source: str  # where this launcher's value came from

    def describe(self) -> str:
        secret = REGISTRY[self.name].secret
        running = "(not set)" if self.running is None else _shown(self.running, secret)
        return f"{self.name}: running {running}, here {_shown(self.here, secret)} ({self.source})"


def _shown(text: str, secret: bool) -> str:
    if secret and text:
        return "(set, hidden)"
    return repr(text)


def services_environment(config: Config) -> dict[str, str]:
    """Every setting a supervised program reads, spelled as its environment (unset as "")."""
    found: dict[str, str] = {}
    for program in ALL_PROGRAMS:
        found.update(config.environment(program))
    return found


def render_environment(values: dict[str, str]) -> str:
    """supervisord's ``environment=`` value for these variables, checked with its own parser.

    supervisord reads it with a non-POSIX shlex and strips quotes from both ends, so a value
    with both quote characters, a quote at either end or a line break cannot be passed.
    """
    from supervisor.datatypes import dict_of_key_value_pairs

    pairs = []
    for name, text in values.items():
        quote = "'" if '"' in text else '"'
        pair = f"{name}={quote}{text}{quote}"
        try:
            intact = dict_of_key_value_pairs(pair) == {name: text}
        except ValueError:
            intact = False
        if not intact:
            raise ConfigError(
                f"{name} cannot be handed to the services through supervisord.conf "
                "(a quote at an end, both kinds of quotes, or a line break)"
            )
        pairs.append(_literal(pair, expansions=2))
    return ",".join(pairs)


def _literal(text: str, expansions: int = 1) -> str:
    """``text`` spelled so that supervisord reads it back: it %-expands most values once, and
    [supervisord]'s ``environment`` and a program's log file twice."""
    return text.replace("%", "%" * 2**expansions)


def written_environment(config_path: Path) -> dict[str, str] | None:
    """The variables a generated supervisord.conf hands its programs, the settings and
    ``catalog.PROGRAM_ENVIRONMENT`` (None: no such file)."""
    from supervisor.datatypes import dict_of_key_value_pairs

    parser = configparser.RawConfigParser()
    if not parser.read(config_path):
        return None
    raw = parser.get("supervisord", "environment", fallback="")
    found: dict[str, str] = dict_of_key_value_pairs(raw.replace("%%%%", "%"))
    return found


@dataclass(frozen=True)
class Stopped:
    """What a shutdown waited for: each program's seconds from the stop to its exit (absent:
    it never reported stopped), and the processes still alive at the end, killed then."""

    seconds: dict[str, float]
    killed: list[int]

    def outlived_stop_wait(self) -> list[str]:
        """Programs that took their whole stopwaitsecs: supervisord SIGKILLed them."""
        return [name for name, took in self.seconds.items() if took >= stop_wait_s(name)]


@dataclass(frozen=True)
class ProcessInfo:
    name: str
    state: str
    pid: int
    uptime_s: float
    log: str
    description: str


class Supervision:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # program -> the services it runs (catalog.placement); and which program runs each
        self.programs = placement(settings.config)
        self.host = {s: program for program, hosted in self.programs.items() for s in hosted}
        self.config_path = settings.home / "supervisord.conf"
        self.socket_path = settings.run_dir / "supervisor.sock"
        self.pidfile = settings.run_dir / "supervisord.pid"

    # -- configuration ---------------------------------------------------------------------
    def render_config(self) -> Path:
        templates = resources.files("keymem.deploy")
        program = string.Template(templates.joinpath("program.conf.template").read_text())
        main = string.Template(templates.joinpath("supervisord.conf.template").read_text())
        paths = {
            "home": self.settings.home,
            "run_dir": self.settings.run_dir,
            "log_dir": self.settings.log_dir,
            "python": sys.executable,
        }
        common = {
            **{name: _literal(str(path)) for name, path in paths.items()},
            "environment": render_environment(
                {**PROGRAM_ENVIRONMENT, **services_environment(self.settings.config)}
            ),
        }
        sections = [
            program.substitute(
                common,
                name=name,
                priority=10 * (i + 1),
                stop_wait_s=math.ceil(stop_wait_s(name)),
                log=_literal(str(self.log_path(name)), expansions=2),
            )
            for i, name in enumerate(self.programs)
        ]
        text = main.substitute(
            common, programs=",".join(self.programs), program_sections="\n".join(sections)
        )
        self.config_path.write_text(text)
        return self.config_path

    def differences(self) -> list[Difference]:
        """The settings the running services read with another value than this launcher's
        (none when supervisord's config predates the settings in it: nothing to compare)."""
        running = written_environment(self.config_path)
        if not running or TRANSPORT.name not in running:
            return []
        config = self.settings.config
        return [
            Difference(name, running.get(name), text, config.values[name].source)
            for name, text in services_environment(config).items()
            if running.get(name) != text
        ]

    # -- state -----------------------------------------------------------------------------
    def rpc(self) -> Any:
        from supervisor.xmlrpc import SupervisorTransport

        transport = SupervisorTransport(None, None, serverurl=f"unix://{self.socket_path}")
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport)

    def supervisord_pid(self) -> int | None:
        """The pid of a live supervisord for this home, or None."""
        try:
            pid = int(self.pidfile.read_text().strip())
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        try:
            state = self.rpc().supervisor.getState()
        except (OSError, xmlrpc.client.Error):
            return None
        return pid if state.get("statename") in ("RUNNING", "RESTARTING") else None

    def processes(self) -> list[ProcessInfo]:
        infos = self.rpc().supervisor.getAllProcessInfo()
        result = []
        for info in infos:
            running = info["statename"] == "RUNNING"
            result.append(
                ProcessInfo(
                    name=info["name"],
                    state=info["statename"],
                    pid=int(info["pid"]),
                    uptime_s=float(info["now"] - info["start"]) if running else 0.0,
                    log=info["stdout_logfile"],
                    description=info["description"],
                )
            )
        order = {name: i for i, name in enumerate(self.programs)}
        return sorted(result, key=lambda p: order.get(p.name, len(order)))

    def service_processes(self) -> dict[str, ProcessInfo]:
        """Each service's process: the program named after it, or the one hosting it."""
        running = {p.name: p for p in self.processes()}
        found = {}
        for service in ALL_PROGRAMS:
            info = running.get(service) or running.get(self.host[service])
            if info is not None:
                found[service] = info
        return found

    def log_path(self, name: str) -> Path:
        """The log of program ``name``, or of the program running service ``name``."""
        return self.settings.log_dir / f"{self.host.get(name, name)}.log"

    # -- start / stop ----------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Serialise up/down across processes so two agents never start two supervisords."""
        self.settings.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.settings.run_dir / "control.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def start(self) -> bool:
        """Start supervisord unless it already runs for this home; True if it was started."""
        private_home(self.settings.home)
        prepare_run_dir(self.settings.endpoints)
        self.settings.log_dir.mkdir(parents=True, exist_ok=True)
        if self.supervisord_pid() is not None:
            return False
        self._remove_stale_sockets()
        config = self.render_config()
        completed = subprocess.run(
            [sys.executable, "-m", "keymem.services.supervisord", "-c", str(config)],
            capture_output=True,
            text=True,
            timeout=SUPERVISOR_START_TIMEOUT_S,
        )
        if completed.returncode != 0:
            raise SupervisionError(
                f"supervisord failed to start (exit {completed.returncode}): "
                f"{completed.stderr.strip() or completed.stdout.strip()}\n"
                f"config: {config}; log: {self.settings.log_dir / 'supervisord.log'}"
            )
        give_up = time.monotonic() + SUPERVISOR_START_TIMEOUT_S
        while self.supervisord_pid() is None:
            if time.monotonic() > give_up:
                raise SupervisionError(
                    f"supervisord did not come up; see {self.settings.log_dir / 'supervisord.log'}"
                )
            time.sleep(0.05)
        return True

    def wait_ready(self, timeout_s: float | None = None) -> float:
        """Block until the router and every worker service answer ``ping`` through the router,
        for up to ``timeout_s`` (KEYMEM_UP_TIMEOUT_S when None).

        Returns the seconds waited; raises ``SupervisionError`` naming each missing service
        with its state and the tail of its log.
        """
        if timeout_s is None:
            timeout_s = self.settings.config[UP_TIMEOUT_S]
        started = time.monotonic()
        missing = list(ALL_PROGRAMS)
        with Client(self.settings.endpoints.frontend, timeout_ms=PING_TIMEOUT_MS) as client:
            while missing and time.monotonic() - started < timeout_s:
                for name in list(missing):
                    try:
                        client.call(name, "ping")
                        missing.remove(name)
                    except KeymemError:
                        pass
                if missing and self._gave_up(missing):
                    break
                if missing:
                    time.sleep(0.05)
        if missing:
            raise SupervisionError(self._not_ready_report(missing, timeout_s))
        return time.monotonic() - started

    def _gave_up(self, services: list[str]) -> bool:
        """True once supervisord stopped retrying a program of ``services`` (no point waiting)."""
        processes = self.service_processes()
        return any(processes[s].state in GAVE_UP_STATES for s in services if s in processes)

    def _not_ready_report(self, missing: list[str], timeout_s: float) -> str:
        states = self.service_processes()
        lines = [f"keymem did not become ready (waited up to {timeout_s:.0f} s):"]
        for name in missing:
            info = states.get(name)
            state = f"{info.state} {info.description}".strip() if info else "unknown"
            log = self.log_path(name)
            lines.append(f"- {name} does not answer (supervisor: {state}); its log: {log}")
            lines.extend(f"    | {line}" for line in _tail(log, LOG_TAIL_LINES))
        return "\n".join(lines)

    def shutdown(self, timeout_s: float = SHUTDOWN_TIMEOUT_S) -> Stopped | None:
        """Stop every program and supervisord itself, each program within its stopwaitsecs;
        what it waited for, or None if nothing was running."""
        pid = self.supervisord_pid()
        if pid is None:
            self._remove_stale_sockets()
            return None
        rpc = self.rpc()
        children = {p.name: p.pid for p in self.processes() if p.pid}
        started = time.monotonic()
        give_up = started + timeout_s
        try:
            rpc.supervisor.stopProcessGroup(GROUP, False)
        except xmlrpc.client.Fault:
            pass  # already stopped
        seconds = self._wait_stopped(set(children), started, give_up)
        with contextlib.suppress(OSError, xmlrpc.client.Error):
            rpc.supervisor.shutdown()
        while _alive(pid) and time.monotonic() < give_up:
            time.sleep(STOP_POLL_S)
        killed = [leftover for leftover in [pid, *children.values()] if _alive(leftover)]
        for leftover in killed:
            os.kill(leftover, signal.SIGKILL)
        self._remove_stale_sockets()
        return Stopped(seconds, killed)

    def _wait_stopped(self, names: set[str], started: float, give_up: float) -> dict[str, float]:
        """Each of ``names``' seconds from ``started`` until supervisord reports it stopped."""
        seconds: dict[str, float] = {}
        while names - seconds.keys() and time.monotonic() < give_up:
            try:
                infos = self.rpc().supervisor.getAllProcessInfo()
            except (OSError, xmlrpc.client.Error):
                break  # supervisord is gone: nothing more to read
            now = time.monotonic()
            for info in infos:
                if info["name"] in names and info["statename"] in STOPPED_STATES:
                    seconds.setdefault(info["name"], now - started)
            time.sleep(STOP_POLL_S)
        return seconds

    def _remove_stale_sockets(self) -> None:
        run_dir = self.settings.run_dir
        if not run_dir.is_dir():
            return
        for path in [*run_dir.glob("*.sock"), self.pidfile]:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie child of ours counts as gone
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return True


def _tail(path: Path, lines: int) -> list[str]:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 16_384))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return ["(no log yet)"]
    return text.splitlines()[-lines:]
