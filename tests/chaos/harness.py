"""The chaos harness: a real deployment under agent-like load, kill -9s, and the figures.

Writers and readers call the ``memory`` service as the MCP front end does (services/mcp/
backend.py): the tool deadline, ``retry=True``, and an idempotency key on every write. Each
write's content is unique, so the final file tells which writes committed: an acknowledged
write missing from it is *lost*, a write the caller was told failed but that is in it was
*reported failed that committed*.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import psutil

from keymem.protocol.client import Client, with_idempotency_key
from keymem.protocol.endpoints import ipc_endpoints
from keymem.protocol.errors import KeymemError
from keymem.services.mcp.backend import TOOL_TIMEOUT_MS
from keymem.store.database import graph_path
from tests.supervised import Deployment

NAMESPACE = "chaos"
# A call that ends later than its deadline plus this has hung.
DEADLINE_SLACK_S = 1.0
# A ping waits behind the load in its service's queue (the lexicon serves one at a time).
PING_TIMEOUT_MS = 1_000
PID_TIMEOUT_MS = 10_000
PING_EVERY_S = 0.02
# The promise: every service answers again within this of its kill -9 (median of its kills).
RECOVERY_TARGET_S = 3.0
UP_TIMEOUT_S = 110  # within tests.supervised.CLI_TIMEOUT_S: a loaded machine starts slowly
CALL_TIMEOUT_MS = 20_000  # a restart test's own calls (not the timed pings)
RECOVERY_GIVE_UP_S = 180.0  # a busy machine; the promise is checked on the medians


@dataclass
class Call:
    kind: str  # "write" or "read"
    started: float
    ended: float
    outcome: str  # "ok" or the error code
    content: str | None = None
    saved: str | None = None

    @property
    def late_s(self) -> float:
        return self.ended - self.started - TOOL_TIMEOUT_MS / 1000


class Load:
    """``writers`` threads, each saving a unique memory then searching, until stopped."""

    def __init__(self, home: Path, writers: int) -> None:
        self.endpoint = ipc_endpoints(home).frontend
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(writers)
        ]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        for thread in self._threads:
            thread.join(TOOL_TIMEOUT_MS / 1000 + 5)

    def _run(self, index: int) -> None:
        with Client(self.endpoint, timeout_ms=TOOL_TIMEOUT_MS) as client:
            n = 0
            while not self._halt.is_set():
                n += 1
                content = f"chaos write {index}-{n} {uuid.uuid4().hex}"
                body = {"content": content, "keys": ["chaos", f"writer {index}"]}
                self._record(client, "write", "remember", with_idempotency_key(body), content)
                self._record(client, "read", "search", {"query": f"writer {index}"}, None)

    def _record(
        self, client: Client, kind: str, method: str, body: dict[str, Any], content: str | None
    ) -> None:
        started = time.monotonic()
        saved = None
        try:
            reply = client.call("memory", method, {**body, "namespace": NAMESPACE}, retry=True)
            outcome = "ok"
            saved = reply.get("saved") if kind == "write" else None
        except KeymemError as exc:
            outcome = exc.code.value
        with self._lock:
            self.calls.append(Call(kind, started, time.monotonic(), outcome, content, saved))


def worker_pids(client: Client, service: str) -> list[int]:
    """The pids of ``service``'s workers as the router lists them."""
    stats = client.call("router", "stats")
    return [int(w["pid"]) for w in stats["services"][service]["workers"]]


def service_pid(client: Client, name: str, timeout_ms: int = PING_TIMEOUT_MS) -> int:
    pid: int = client.call(name, "ping", timeout_ms=timeout_ms, retry=True)["pid"]
    return pid


def kill_and_time(home: Path, name: str, *, parent: bool = False) -> float:
    """kill -9 the process that answers for ``name`` (with ``parent``, the process it was
    forked from, services/prefork.py); seconds until a new one answers ``ping`` through the
    router."""
    with Client(ipc_endpoints(home).frontend) as client:
        old = service_pid(client, name, PID_TIMEOUT_MS)
        killed_at = time.monotonic()
        os.kill(psutil.Process(old).ppid() if parent else old, signal.SIGKILL)
        while time.monotonic() - killed_at < RECOVERY_GIVE_UP_S:
            try:
                if service_pid(client, name) != old:
                    return time.monotonic() - killed_at
            except KeymemError:
                pass
            time.sleep(PING_EVERY_S)
    raise AssertionError(f"{name} did not answer within {RECOVERY_GIVE_UP_S} s of its kill")


@dataclass
class Figures:
    """What a chaos run measured (docs/RELIABILITY.md quotes the long run's)."""

    writes_acked: int = 0
    acked_lost: int = 0
    failed_committed: int = 0
    writes_failed: int = 0
    calls: int = 0
    past_deadline: int = 0
    recovery_s: dict[str, list[float]] = field(default_factory=dict)
    # The same for a preforked service's parent: a cold start, outside the promise's figures.
    parent_recovery_s: dict[str, list[float]] = field(default_factory=dict)
    # From supervisord's log: seconds from a program's death to its new process, per kill.
    respawn_s: list[float] = field(default_factory=list)

    def medians(self) -> dict[str, float]:
        return {name: statistics.median(times) for name, times in self.recovery_s.items()}

    def report(self) -> str:
        lines = [
            f"calls: {self.calls}; past deadline + {DEADLINE_SLACK_S:.0f} s: {self.past_deadline}",
            f"writes acknowledged: {self.writes_acked}; lost: {self.acked_lost}",
            f"writes reported failed: {self.writes_failed}; of them committed: "
            f"{self.failed_committed}",
            f"supervisord respawned a killed program after at most "
            f"{max(self.respawn_s, default=0.0):.3f} s",
        ]
        recoveries = [
            *self.recovery_s.items(),
            *((f"{name}'s parent (cold)", t) for name, t in self.parent_recovery_s.items()),
        ]
        for name, times in recoveries:
            shown = ", ".join(f"{t:.2f}" for t in times)
            lines.append(
                f"{name}: answers again after {statistics.median(times):.2f} s median ({shown})"
            )
        return "\n".join(lines)


_LOG_LINE = re.compile(r"^(\S+ \S+) \w+ (exited|spawned): '?(\w+)'?")


def respawn_gaps(log: Path) -> list[float]:
    """Seconds between each program's exit and its next spawn, from supervisord's log."""
    died: dict[str, datetime] = {}
    gaps = []
    for line in log.read_text().splitlines():
        match = _LOG_LINE.match(line)
        if match is None:
            continue
        at = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
        event, name = match.group(2), match.group(3)
        if event == "exited":
            died[name] = at
        elif name in died:
            gaps.append((at - died.pop(name)).total_seconds())
    return gaps


def figures(
    deployment: Deployment,
    load: Load,
    recovery_s: dict[str, list[float]],
    parent_recovery_s: dict[str, list[float]],
) -> Figures:
    """Stop the deployment and read its file: what was acknowledged, what committed."""
    deployment.keymem("down")
    conn = duckdb.connect(str(graph_path(deployment.home)), read_only=True)
    try:
        rows = conn.execute(
            "SELECT id, content FROM memories WHERE namespace = ?", [NAMESPACE]
        ).fetchall()
    finally:
        conn.close()
    ids = {str(r[0]) for r in rows}
    contents = {str(r[1]) for r in rows}
    writes = [c for c in load.calls if c.kind == "write"]
    acked = [c for c in writes if c.outcome == "ok"]
    failed = [c for c in writes if c.outcome != "ok"]
    return Figures(
        writes_acked=len(acked),
        acked_lost=sum(1 for c in acked if c.saved not in ids),
        failed_committed=sum(1 for c in failed if c.content in contents),
        writes_failed=len(failed),
        calls=len(load.calls),
        past_deadline=sum(1 for c in load.calls if c.late_s > DEADLINE_SLACK_S),
        recovery_s=recovery_s,
        parent_recovery_s=parent_recovery_s,
        respawn_s=respawn_gaps(deployment.home / "logs" / "supervisord.log"),
    )
