"""keymem across hosts, on one machine: network namespaces as hosts, CURVE between them.

``Hosts`` makes three network namespaces joined by a bridge in the router's (10.213.X.0/24,
addresses it assigns; nothing leaves them) and removes them however the run ends. Each host
gets a KEYMEM_HOME of its own: the router's holds the keys (``keymem keys``), the others the
router's public key and their client key, copied the way docs/SCALING.md says.

Run as a benchmark (root, ``ip netns``)::

    python -m benchmarks.remote_workers --seconds 20

measures new keys/s with 32 clients (in the client host) against one embedder (the router's
host) and then two (plus ``keymem worker embedder --connect`` on the worker host), in one run.
``load`` is the client side, run inside the client host by both this and tests/test_netns.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROUTER, WORKER, CLIENT = "router", "worker", "client"
HOST_NAMES = (ROUTER, WORKER, CLIENT)
ROUTER_PORT = 47810
SUBNET_PREFIX = "10.213"
CLIENT_KEY = "ops"  # the client host's key: every namespace (it calls the embedder itself)
REMOTE_WORKER_KEY = "worker-host"
READY_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 10.0
CALL_TIMEOUT_MS = 3_000
# A call's reply may come this late past its deadline: the router's own timeout reply plus the
# client's grace (protocol/client.py REPLY_GRACE_MS) and scheduling on a loaded 2-core box.
LATE_SLACK_MS = 1_000
CLIENTS = 32
PYTHON = sys.executable
MODULE = "benchmarks.remote_workers"  # run inside a host by name: __name__ may be __main__


def run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


@dataclass
class Host:
    name: str  # its network namespace
    address: str
    home: Path
    env: dict[str, str]
    link: str = ""  # its end of the veth pair to the router's bridge ("" on the router's host)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def spawn(self, *args: str, log: str) -> subprocess.Popen[bytes]:
        """``args`` inside this host, output to ``log`` in its home."""
        with open(self.home / log, "ab") as out:
            process = subprocess.Popen(
                ["ip", "netns", "exec", self.name, *args],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append(process)
        return process

    def python(self, *args: str, timeout_s: float = 120.0) -> str:
        """A python command inside this host, to its end; its stdout."""
        done = subprocess.run(
            ["ip", "netns", "exec", self.name, PYTHON, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} in {self.name}: {done.stderr[-2000:]}")
        return done.stdout

    def keymem(self, *args: str) -> str:
        return self.python("-m", "keymem.services.cli", *args)

    def stop(self) -> None:
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(STOP_TIMEOUT_S)


@contextlib.contextmanager
def hosts() -> Iterator[dict[str, Host]]:
    """Three namespaces on one bridge (router .1, worker .2, client .3), torn down at the end."""
    tag = f"km{os.getpid() % 10_000}"
    subnet = f"{SUBNET_PREFIX}.{random.randint(1, 254)}"
    root = Path(tempfile.mkdtemp(prefix="km-net-", dir="/tmp"))
    made: dict[str, Host] = {}
    bridge = f"{tag}br"
    try:
        for index, role in enumerate(HOST_NAMES, 1):
            name = f"{tag}-{role[0]}"
            run("ip", "netns", "add", name)
            home = root / role
            home.mkdir(mode=0o700)
            env = {k: v for k, v in os.environ.items() if not k.startswith("KEYMEM_")}
            env |= {
                "KEYMEM_HOME": str(home),
                "KEYMEM_TRANSPORT": "tcp",
                "KEYMEM_TCP_HOST": f"{subnet}.1",
                "KEYMEM_TCP_PORT": str(ROUTER_PORT),
            }
            made[role] = Host(name, f"{subnet}.{index}", home, env)
            run("ip", "-n", name, "link", "set", "lo", "up")
        router = made[ROUTER].name
        run("ip", "-n", router, "link", "add", bridge, "type", "bridge")
        for role in HOST_NAMES:
            host = made[role]
            if role == ROUTER:
                run("ip", "-n", router, "addr", "add", f"{host.address}/24", "dev", bridge)
                continue
            inside, outside = f"{tag}{role[0]}0", f"{tag}{role[0]}1"
            host.link = inside
            run("ip", "link", "add", inside, "netns", host.name, "type", "veth",
                "peer", "name", outside, "netns", router)  # fmt: skip
            run("ip", "-n", router, "link", "set", outside, "master", bridge, "up")
            run("ip", "-n", host.name, "addr", "add", f"{host.address}/24", "dev", inside)
            run("ip", "-n", host.name, "link", "set", inside, "up")
        run("ip", "-n", router, "link", "set", bridge, "up")
        yield made
    finally:
        for host in made.values():
            host.stop()
            for pid in _pids_in(host.name):  # anything a process of ours forked there
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", host.name], capture_output=True, timeout=30)
        shutil.rmtree(root, ignore_errors=True)


def _pids_in(namespace: str) -> list[int]:
    listed = subprocess.run(
        ["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=30
    )
    return [int(pid) for pid in listed.stdout.split()]


def hand_out_keys(net: dict[str, Host]) -> None:
    """``keymem keys`` on the router's host; each other host gets the router's public key and
    its own client key, as an operator would copy them."""
    router = net[ROUTER]
    router.keymem("keys", "init")
    for role, client in ((WORKER, REMOTE_WORKER_KEY), (CLIENT, CLIENT_KEY)):
        router.keymem("keys", "add-client", client)
        source = router.home / "keys"
        target = net[role].home / "keys"
        (target / "clients").mkdir(parents=True, mode=0o700)
        shutil.copy2(source / "server.key", target / "server.key")
        shutil.copy2(source / "clients" / f"{client}.key_secret", target / "clients")
        net[role].env["KEYMEM_CLIENT_KEY"] = client


def start_router(net: dict[str, Host], programs: tuple[str, ...] = ("router", "embedder")) -> None:
    """The router and one embedder on the router's host (as supervisord would run them)."""
    router = net[ROUTER]
    for program in programs:
        router.spawn(PYTHON, "-m", "keymem.services", program, log=f"{program}.log")


def start_remote_worker(net: dict[str, Host]) -> subprocess.Popen[bytes]:
    address = f"tcp://{net[ROUTER].address}:{ROUTER_PORT}"
    return net[WORKER].spawn(
        PYTHON, "-m", "keymem.services.cli", "worker", "embedder", "--connect", address,
        log="worker.log",
    )  # fmt: skip


def embedder_workers(net: dict[str, Host]) -> list[dict[str, Any]]:
    """The embedder workers the router lists, asked from the client's host."""
    listed: list[dict[str, Any]] = json.loads(net[CLIENT].python("-m", MODULE, "workers"))
    return listed


def wait_for_embedders(net: dict[str, Host], count: int) -> list[dict[str, Any]]:
    give_up = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < give_up:
        with contextlib.suppress(RuntimeError):
            workers = embedder_workers(net)
            if len(workers) == count:
                return workers
        time.sleep(1.0)
    raise RuntimeError(f"the router never listed {count} embedder workers")


# -- the client side, run inside the client host -------------------------------------------------
def _settings() -> Any:
    from keymem.services.config import Settings

    return Settings.from_env()  # registers this host's key for the router (protocol/curve.py)


def list_workers() -> list[dict[str, Any]]:
    from keymem.protocol.client import Client

    with Client(_settings().endpoints.frontend, timeout_ms=2_000) as client:
        workers: list[dict[str, Any]] = client.call("router", "stats")["services"]["embedder"][
            "workers"
        ]
    return workers


async def _load(clients: int, seconds: float, timeout_ms: int) -> dict[str, Any]:
    from keymem.protocol.async_client import AsyncClient
    from keymem.protocol.errors import KeymemError

    client = AsyncClient(_settings().endpoints.frontend, timeout_ms=timeout_ms)
    outcomes: Counter[str] = Counter()
    worst_ms = 0.0
    late = 0
    keys = 0
    stop_at = time.monotonic() + seconds

    async def one(client_id: int) -> None:
        nonlocal worst_ms, late, keys
        call = 0
        while time.monotonic() < stop_at:
            body = {"texts": [f"remote key {client_id}-{call}-{time.time_ns()}"], "kind": "key"}
            call += 1
            started = time.monotonic()
            try:
                await client.call("embedder", "embed", body)
                outcomes["ok"] += 1
                keys += 1
            except KeymemError as exc:
                outcomes[exc.code.value] += 1
            elapsed_ms = (time.monotonic() - started) * 1000
            worst_ms = max(worst_ms, elapsed_ms)
            late += elapsed_ms > timeout_ms + LATE_SLACK_MS

    async with client:
        started = time.monotonic()
        await asyncio.gather(*(one(i) for i in range(clients)))
        took = time.monotonic() - started
    return {
        "clients": clients,
        "seconds": round(took, 2),
        "outcomes": dict(outcomes),
        "keys_per_s": round(keys / took, 1),
        "worst_ms": round(worst_ms, 1),
        "late": late,
        "timeout_ms": timeout_ms,
    }


def load(clients: int, seconds: float, timeout_ms: int) -> dict[str, Any]:
    """``clients`` concurrent callers embedding one new key each per call for ``seconds``:
    outcomes by code, keys/s, the slowest call and how many ended past their deadline."""
    return asyncio.run(_load(clients, seconds, timeout_ms))


def measure(seconds: float) -> dict[str, Any]:
    """keys/s with the router host's embedder alone, then with a remote one beside it."""
    with hosts() as net:
        hand_out_keys(net)
        start_router(net)
        wait_for_embedders(net, 1)
        client = net[CLIENT]
        args = ("-m", MODULE, "load", "--clients", str(CLIENTS), "--seconds", str(seconds))
        one = json.loads(client.python(*args, timeout_s=seconds + 120))
        start_remote_worker(net)
        wait_for_embedders(net, 2)
        two = json.loads(client.python(*args, timeout_s=seconds + 120))
        served = {f"{w['key']}@{w['address']}": w["requests"] for w in embedder_workers(net)}
    return {
        "one_worker": one,
        "two_workers": two,
        "ratio": round(two["keys_per_s"] / max(one["keys_per_s"], 1e-9), 2),
        "requests_by_worker": served,
        "load_average": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "action", nargs="?", default="measure", choices=("measure", "load", "workers")
    )
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--timeout-ms", type=int, default=CALL_TIMEOUT_MS)
    args = parser.parse_args(argv)
    if args.action == "load":
        result: Any = load(args.clients, args.seconds, args.timeout_ms)
    elif args.action == "workers":
        result = list_workers()
    else:
        result = measure(args.seconds)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
