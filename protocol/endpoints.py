"""Where the router listens, for each placement: ipc (default), tcp, or inproc.

Kept free of heavy imports: the hook resolves the router's address from here. The settings
that choose one (KEYMEM_TRANSPORT, ...) are read by services/config.py.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import NamedTuple

DEFAULT_TCP_PORT = 47810
# What keymem's processes create is their user's alone: files 0600, directories 0700.
PRIVATE_UMASK = 0o077
PRIVATE_DIR_MODE = 0o700
# sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
MAX_IPC_PATH_BYTES = 107


class EndpointError(ValueError):
    """An endpoint configuration that cannot work (too long a path, a non-loopback host)."""


class Endpoints(NamedTuple):
    frontend: str  # clients: MCP front end, hook, CLI
    backend: str  # workers register here
    transport: str  # "ipc" | "tcp" | "inproc"
    run_dir: Path | None = None
    secure: bool = False  # tcp under CURVE (protocol/curve.py): any host, keys required

    def direct(self, service: str, pid: int, index: int = 0) -> str | None:
        """Where one worker listens for direct (router-bypassing) requests; None under CURVE,
        where only the router authenticates peers and enforces namespace access."""
        if self.secure:
            return None
        if self.transport == "ipc":
            assert self.run_dir is not None
            return _ipc(self.run_dir / f"{service}-{pid}-{index}.sock")
        if self.transport == "tcp":
            host = self.frontend.removeprefix("tcp://").rsplit(":", 1)[0]
            return f"tcp://{host}:*"
        return f"{self.frontend}-{service}-{index}"


def run_dir(home: Path) -> Path:
    return home / "run"


def _ipc(path: Path) -> str:
    if len(os.fsencode(path)) > MAX_IPC_PATH_BYTES:
        raise EndpointError(
            f"ipc socket path {path} is longer than {MAX_IPC_PATH_BYTES} bytes; "
            "set KEYMEM_HOME to a shorter directory or KEYMEM_TRANSPORT=tcp"
        )
    return f"ipc://{path}"


def ipc_endpoints(home: Path) -> Endpoints:
    rd = run_dir(home)
    return Endpoints(
        frontend=_ipc(rd / "router.sock"),
        backend=_ipc(rd / "workers.sock"),
        transport="ipc",
        run_dir=rd,
    )


def tcp_endpoints(host: str, port: int, *, secure: bool = False) -> Endpoints:
    """The router's tcp endpoints (backend on port + 1); plain tcp only on loopback."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not (secure or loopback):
        # Invariant 7: nothing leaves the machine unauthenticated.
        raise EndpointError(
            f"refusing plain tcp on non-loopback host {host!r}: create CURVE keys "
            "(keymem keys init) to use tcp across hosts"
        )
    return Endpoints(
        frontend=f"tcp://{host}:{port}",
        backend=f"tcp://{host}:{port + 1}",
        transport="tcp",
        secure=secure,
    )


def inproc_endpoints(name: str | None = None) -> Endpoints:
    tag = name or os.urandom(6).hex()
    return Endpoints(
        frontend=f"inproc://keymem-{tag}-frontend",
        backend=f"inproc://keymem-{tag}-backend",
        transport="inproc",
    )


def make_private() -> None:
    """Create every file of this process private to its user, whatever umask it inherited.

    Memories, logs, backups, exports and caches hold what the user told their agents; with
    the usual umask 022 they would be readable by every local user (invariant 7).
    """
    os.umask(PRIVATE_UMASK)


def private_home(home: Path) -> None:
    """Create KEYMEM_HOME (0700), and take back a home another umask left open."""
    home.mkdir(parents=True, exist_ok=True)
    os.chmod(home, PRIVATE_DIR_MODE)


def prepare_run_dir(endpoints: Endpoints) -> None:
    """Create the run directory private to this user (0700), fixing looser permissions."""
    if endpoints.run_dir is None:
        return
    endpoints.run_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(endpoints.run_dir, PRIVATE_DIR_MODE)


def ipc_path(endpoint: str) -> Path | None:
    return Path(endpoint.removeprefix("ipc://")) if endpoint.startswith("ipc://") else None
