"""Who may connect to the router under CURVE: the ZAP handler and the keys it admits.

pyzmq's ``ThreadAuthenticator`` answers libzmq's ZAP requests in a thread of the router
process. Each CURVE handshake asks it about the peer's public key: on the frontend any key in
KEYMEM_HOME/keys/access.json is admitted, on the backend only keys that may use every
namespace (a worker sees every request it serves). A refused key is logged with the peer's
address and counted. Once admitted, every message carries the key as its ``User-Id`` frame
property; the broker maps it back to a ``Principal`` per message, so a key revoked while its
connection stays open is refused from its next message on.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
from zmq.auth.thread import ThreadAuthenticator

from keymem.protocol import curve
from keymem.protocol.curve import KeyPair
from keymem.services import keys
from keymem.services.config import ConfigError
from keymem.services.keys import ClientEntry

log = logging.getLogger("keymem.router.auth")


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated sender of a message (``entry`` None: its key was revoked)."""

    public: str
    address: str
    entry: ClientEntry | None

    @property
    def name(self) -> str:
        return self.entry.name if self.entry is not None else f"revoked key {self.public[:8]}…"


class AccessList:
    """access.json as the router sees it, read again whenever the file changes."""

    def __init__(self, home: Path) -> None:
        self.path = keys.access_path(home)
        self.home = home
        self.refused = 0
        self.generation = 0  # counts the reloads; the broker compares it, whoever reloaded
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._by_public: dict[str, ClientEntry] = {}
        self.refresh()

    def refresh(self) -> None:
        """Read the file again if it changed. A broken file keeps the last good list (and is
        logged) rather than locking every client out."""
        try:
            status = os.stat(self.path)
            stamp = (status.st_mtime_ns, status.st_size)
        except FileNotFoundError:
            stamp = (0, 0)
        with self._lock:
            if stamp == self._stamp:
                return
            self._stamp = stamp
            try:
                entries = keys.read_access(self.home)
            except keys.KeyStoreError as exc:
                log.error("keeping the previous access list: %s", exc)
                return
            self._by_public = {entry.public: entry for entry in entries.values()}
            self.generation += 1

    def entry(self, public: str) -> ClientEntry | None:
        return self._by_public.get(public)

    def admit(self, domain: str, public: str, address: str) -> bool:
        """A handshake's verdict: a listed key; on the backend one that may serve."""
        self.refresh()
        entry = self.entry(public)
        if entry is not None and (domain != curve.BACKEND_DOMAIN or entry.namespaces is None):
            return True
        self.refused += 1
        why = "unknown key" if entry is None else f"client {entry.name!r} may not serve as a worker"
        log.warning("refused a %s connection from %s: %s %s", domain, address, why, public)
        return False

    def principal_of(self, known: Principal) -> Principal:
        """``known`` under the current list (its entry None once revoked)."""
        return Principal(known.public, known.address, self.entry(known.public))

    def principal(self, frame: zmq.Frame) -> Principal | None:
        """Who sent the message this frame belongs to; None for an in-process peer (inproc
        runs no security handshake: the router's own memory threads)."""
        try:
            public = frame.get("User-Id")
            address = frame.get("Peer-Address")
        except zmq.ZMQError:
            return None
        return Principal(str(public), str(address), self.entry(str(public)))


class KeyAuthenticator(ThreadAuthenticator):
    """The ZAP handler: CURVE handshakes decided by an ``AccessList``, refusals logged."""

    def __init__(self, context: zmq.Context[Any], access: AccessList) -> None:
        super().__init__(context, log=logging.getLogger("keymem.router.zap"))
        self.access = access
        self._address = ""

    async def handle_zap_message(self, msg: list[bytes]) -> None:
        # The address is a ZAP request's fourth frame; the credentials callback never sees it.
        self._address = msg[3].decode("utf-8", "replace") if len(msg) > 3 else "?"
        await super().handle_zap_message(msg)

    def callback(self, domain: str, key: bytes) -> bool:
        return self.access.admit(domain, key.decode("ascii"), self._address)

    def start_serving(self) -> None:
        self.start()
        for domain in (curve.FRONTEND_DOMAIN, curve.BACKEND_DOMAIN):
            self.configure_curve_callback(domain, self)


@dataclass(frozen=True)
class Security:
    """What a CURVE router needs: its key pair and whom it admits."""

    server: KeyPair
    access: AccessList

    @classmethod
    def of_home(cls, home: Path) -> Security:
        try:
            return cls(keys.server_pair(home), AccessList(home))
        except keys.KeyStoreError as exc:
            raise ConfigError(str(exc)) from exc
