"""CURVE keys in KEYMEM_HOME/keys: the router's key pair, named client keys and their access.

```
keys/                      0700
  server.key               the router's public key: copied to every host that connects
  server.key_secret        0600, the router's host only
  clients/NAME.key         a client's public key
  clients/NAME.key_secret  0600, its key pair: copied to the one host that uses it
  access.json              0600, NAME -> {public, namespaces}: whom the router admits
```

``keymem keys`` (services/cli/keys.py) writes them; the router reads ``access.json`` again
whenever it changes (services/router/auth.py), so a revoked key is refused without a restart.
A client key with ``namespaces`` null may use every namespace and register workers; one with a
list may call only the memory service, in those namespaces (services/router/acl.py). Only the
standard library is imported at start: the hook loads this module on every prompt, and
``zmq.auth`` (which brings ``logging``) only when a key file is read or written.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import NamedTuple

from keymem.protocol.curve import ClientKeys, KeyPair
from keymem.protocol.endpoints import PRIVATE_DIR_MODE

KEYS_DIR = "keys"
CLIENTS_DIR = "clients"
SERVER_NAME = "server"
ACCESS_FILE = "access.json"
PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"
# The key the router's own host uses (its CLI, hook, MCP server and supervised workers).
LOCAL_CLIENT = "local"
PRIVATE_FILE_MODE = 0o600
CLIENT_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
# A namespace pattern ending in this matches every namespace that starts with what precedes it.
PREFIX_WILDCARD = "*"


class KeyStoreError(ValueError):
    """A key that is missing, malformed or named badly; the message says what to run."""


class ClientEntry(NamedTuple):
    name: str
    public: str  # z85
    namespaces: tuple[str, ...] | None  # None: every namespace, and may serve as a worker

    def to_json(self) -> dict[str, object]:
        return {
            "public": self.public,
            "namespaces": None if self.namespaces is None else list(self.namespaces),
        }


def keys_dir(home: Path) -> Path:
    return home / KEYS_DIR


def secured(home: Path) -> bool:
    """Whether tcp runs under CURVE here: this host holds the router's public key."""
    return (keys_dir(home) / f"{SERVER_NAME}{PUBLIC_SUFFIX}").is_file()


def router_elsewhere(home: Path) -> bool:
    """Whether this host is a CURVE client of a router on another host: it holds the router's
    public key but not its secret (``keymem keys init`` ran elsewhere)."""
    return secured(home) and not (keys_dir(home) / f"{SERVER_NAME}{SECRET_SUFFIX}").is_file()


def server_pair(home: Path) -> KeyPair:
    """The router's key pair (only the router's host has its secret half)."""
    path = keys_dir(home) / f"{SERVER_NAME}{SECRET_SUFFIX}"
    public, secret = _load(path, "run `keymem keys init` on the router's host")
    if secret is None:
        raise KeyStoreError(f"{path} holds no secret key")
    return KeyPair(public, secret)


def client_keys(home: Path, name: str) -> ClientKeys:
    """What this host presents to the router: the server's public key and client ``name``."""
    where = keys_dir(home)
    server_public, _ = _load(
        where / f"{SERVER_NAME}{PUBLIC_SUFFIX}", "copy it from the router's KEYMEM_HOME/keys"
    )
    path = where / CLIENTS_DIR / f"{name}{SECRET_SUFFIX}"
    public, secret = _load(
        path, f"run `keymem keys add-client {name}` on the router's host and copy the file here"
    )
    if secret is None:
        raise KeyStoreError(f"{path} holds no secret key")
    return ClientKeys(server_public, KeyPair(public, secret))


def init(home: Path) -> bool:
    """Create the router's key pair and the ``local`` client key, once; True if created."""
    where = _private_dir(keys_dir(home))
    if (where / f"{SERVER_NAME}{SECRET_SUFFIX}").exists():
        return False
    if secured(home):
        raise KeyStoreError(
            f"{where} holds the router's public key but not its secret: this host is a client"
        )
    _create(where, SERVER_NAME)
    add_client(home, LOCAL_CLIENT, None)
    return True


def add_client(home: Path, name: str, namespaces: list[str] | None) -> ClientEntry:
    """A new client key pair, admitted by the router (``namespaces`` None: every one)."""
    if not CLIENT_NAME.match(name):
        raise KeyStoreError(
            f"client name {name!r}: use 1-64 lower-case letters, digits, '.', '_' or '-'"
        )
    server_pair(home)  # the router's host only
    access = read_access(home)
    if name in access:
        raise KeyStoreError(f"client {name!r} exists; revoke it first to replace its key")
    clients = _private_dir(keys_dir(home) / CLIENTS_DIR)
    public, _ = _create(clients, name)
    entry = ClientEntry(name, public.decode("ascii"), _patterns(namespaces))
    _write_access(home, {**access, name: entry})
    return entry


def revoke(home: Path, name: str) -> ClientEntry:
    """Remove client ``name``: the router refuses its key from its next message on."""
    access = read_access(home)
    entry = access.pop(name, None)
    if entry is None:
        raise KeyStoreError(f"no client {name!r} (keymem keys list)")
    _write_access(home, access)
    for suffix in (PUBLIC_SUFFIX, SECRET_SUFFIX):
        (keys_dir(home) / CLIENTS_DIR / f"{name}{suffix}").unlink(missing_ok=True)
    return entry


def read_access(home: Path) -> dict[str, ClientEntry]:
    """The admitted clients by name ({} when there is no access file)."""
    path = access_path(home)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise KeyStoreError(f"{path} is unreadable: {exc}") from None
    if not isinstance(raw, dict):
        raise KeyStoreError(f"{path} must hold an object of clients")
    entries = {}
    for name, value in raw.items():
        namespaces = value.get("namespaces") if isinstance(value, dict) else None
        public = value.get("public") if isinstance(value, dict) else None
        if not isinstance(public, str) or not (
            namespaces is None
            or (isinstance(namespaces, list) and all(isinstance(n, str) for n in namespaces))
        ):
            raise KeyStoreError(f"{path}: client {name!r} is malformed")
        entries[name] = ClientEntry(name, public, None if namespaces is None else tuple(namespaces))
    return entries


def access_path(home: Path) -> Path:
    return keys_dir(home) / ACCESS_FILE


def _patterns(namespaces: list[str] | None) -> tuple[str, ...] | None:
    if namespaces is None:
        return None
    from keymem.services.graph.text import normalize_namespace  # the graph's own spelling

    cleaned = tuple(dict.fromkeys(normalize_namespace(n) for n in namespaces if n.strip()))
    if not cleaned:
        raise KeyStoreError("--namespaces needs at least one namespace")
    return cleaned


def _create(where: Path, name: str) -> tuple[bytes, bytes]:
    from zmq.auth.certs import create_certificates, load_certificate

    public_file, secret_file = create_certificates(where, name)
    for path in (public_file, secret_file):
        os.chmod(path, PRIVATE_FILE_MODE)
    public, secret = load_certificate(secret_file)
    assert secret is not None
    return public, secret


def _load(path: Path, fix: str) -> tuple[bytes, bytes | None]:
    from zmq.auth.certs import load_certificate

    try:
        return load_certificate(path)
    except OSError:
        raise KeyStoreError(f"no key file {path}: {fix}") from None
    except ValueError as exc:
        raise KeyStoreError(f"{path} is not a key file: {exc}") from None


def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, PRIVATE_DIR_MODE)
    return path


def _write_access(home: Path, access: dict[str, ClientEntry]) -> None:
    path = access_path(home)
    staged = path.with_suffix(".tmp")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "w") as handle:
        json.dump({name: entry.to_json() for name, entry in sorted(access.items())}, handle)
        handle.write("\n")
    os.replace(staged, path)
