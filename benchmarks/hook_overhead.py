"""The hook's overhead: its round trip as a host runs it, next to the same inject called in
process over the same socket, on one deployment.

    python -m benchmarks.hook_overhead [--store PATH] [--runs 30]

``--store`` is a ``graph.duckdb`` file (copied into a fresh home; the first ``keymem up`` embeds
its keys and the lexicon indexes it) or a KEYMEM_HOME template directory, copied whole (a 1M
home with its lexicon cache and key indexes: run the whole benchmark under ``flock
/tmp/km1m.lock``). Each round, in turn, so every figure sees the same load:

- ``hook``: the command ``keymem install`` writes for this installation (the ``keymem-hook``
  console script, else ``python -m keymem.hooks.prompt_submit``), fed host JSON whose ``cwd``
  maps to the store's first namespace; spawn to exit, with its CPU time;
- ``hook_pyzmq``: the same hook with pyzmq's ``Client`` in place of its stdlib ipc client
  (protocol/zmtp.py), as a router on tcp is reached: the before of that change, in the same run;
- ``inject``: the body the hook sends (``shorten``-ed prompt, ``scope_of``'s namespaces), sent by
  a ``Client`` in this process to the same frontend; ``overhead`` is the difference of the p50s;
- ``inject_rounds``: the same body through ``Inject`` run in this process over a ``Client``
  of its own (the memory service's code, its calls timed here): the wall ms of each round of
  parallel calls it makes, named by the calls in it (``graph.recall_candidates``,
  ``reranker.score``, ...), how many ids it annotated (coverage, subjects), and, apart,
  ``lexicon.coverage`` and ``graph.memory_keys`` for the pool's first ``CANDIDATES`` ids and
  for the whole pool (what annotating more ids costs the lexicon and the graph); those rounds
  are warm (the prompts are cycled), ``inject_rounds_fresh`` the same for a prompt never asked
  before, one each round (its query embedded afresh, as a user's new prompt is);
- ``phases``: a probe process that runs the hook's ``main`` with ``IpcClient.__init__`` and
  ``IpcClient.call`` timed: interpreter start, imports, settings + stdin + scope, client,
  inject (the ipc client connects and greets the router in its first call), format + write,
  exit;
- the interpreter's floors: ``python -I -S -c pass``, ``python -c pass``, ``import msgpack``,
  ``import zmq, msgpack``;
- with ``--installed VENV``, a keymem installed as a user installs it (``pip install .`` into
  VENV, README's first command): its ``keymem-hook`` (``hook_installed``) and its
  ``python -c pass`` in the same rounds. A development checkout's editable install starts every
  interpreter through setuptools' editable finder (its ``.pth`` imports pathlib, re,
  urllib.parse: ``python -c pass`` ~50 ms against ~24 here); the hook imports those modules
  itself, so whether its round trip differs between the two installs is what this measures.

It also reports how many modules the hook imports and any it compiled from source (a stale or
missing ``.pyc``: every prompt would pay for the compile). Absolute times follow the box's load
(printed with them); compare figures within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.deployment import BenchHome, bench_home
from benchmarks.recall_bench import LIVENESS
from keymem.hooks.prompt_submit import shorten
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.protocol.errors import KeymemError
from keymem.protocol.limits import COVERAGE_MAX_IDS
from keymem.services.cli.hosts import HOOK_SCRIPT, this_installation
from keymem.services.config import load
from keymem.services.memory.inject import CANDIDATES, Inject
from keymem.services.memory.search import GATED_FUSION, Search
from keymem.services.scope import scope_of
from keymem.store.database import graph_path

PROJECT_DIR = "/tmp/km-hook-project"  # the hook's cwd, mapped to NAMESPACE
NAMESPACE = "ns0"  # the synthetic stores' first namespace (benchmarks.graph_bench)
SESSION_ID = "bench-hook-overhead"
PROMPTS = 8  # distinct prompts, cycled
FRESH_FIRST = 1_000  # inject_rounds_fresh's prompts: one never asked before, each round
UP_TIMEOUT_S = "900"
CALL_TIMEOUT_MS = 60_000
WARM_ROUNDS = 2
LEXICON_WAIT_S = 1_800  # a store's first index from the feed (10k: seconds; 1M: minutes)
POLL_S = 1.0
# Does what the hook's main does (respond, then os._exit) with its client and inject timed;
# reports perf_counter marks as JSON on stderr, with the wall clock at its first line (the
# parent knows when it spawned it).
PROBE = """
import json, os, sys, time
started_at, p0 = time.time(), time.perf_counter()
from keymem.hooks import prompt_submit
from keymem.protocol.zmtp import IpcClient as Client
marks = {"imports": time.perf_counter()}
def timed(name, method):
    def wrapper(*args, **kwargs):
        marks[name + "_start"] = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            marks[name + "_end"] = time.perf_counter()
    return wrapper
Client.__init__ = timed("client", Client.__init__)
Client.call = timed("inject", Client.call)
code = prompt_submit.respond()
marks["main_end"] = time.perf_counter()
sys.stderr.write(json.dumps({"started_at": started_at, "p0": p0, "finished_at": started_at
                             + marks["main_end"] - p0, **marks}))
sys.stderr.flush()
os._exit(code)  # as prompt_submit.main ends
"""
PHASES = ("interpreter", "imports", "settings", "client", "inject", "format", "exit")
# The hook as it was before protocol/zmtp.py: every router reached through pyzmq's Client.
HOOK_PYZMQ = """
from keymem.hooks import prompt_submit
from keymem.protocol.client import Client
prompt_submit.connect = lambda router, timeout_ms: Client(router, timeout_ms=timeout_ms)
prompt_submit.main()
"""


class RoundClient(Client):
    """A ``Client`` that times each ``call_many`` round and keeps the graph stage's pools."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(endpoint, timeout_ms=CALL_TIMEOUT_MS)
        self.rounds: dict[str, float] = {}
        self.pools: list[tuple[str, list[str]]] = []

    def call_many(
        self, calls: Sequence[tuple[str, str, Any]], *, timeout_ms: int | None = None
    ) -> list[Any]:
        started = time.perf_counter()
        outcomes = super().call_many(calls, timeout_ms=timeout_ms)
        name = "+".join(sorted({f"{service}.{method}" for service, method, _ in calls}))
        self.rounds[name] = self.rounds.get(name, 0.0) + (time.perf_counter() - started) * 1000
        for (_, method, body), outcome in zip(calls, outcomes, strict=True):
            if method == "recall_candidates" and isinstance(outcome, dict):
                ids = [c["memory_id"] for c in outcome["candidates"]]
                self.pools.append((body["namespace"], ids))
            if method == "memory_keys":
                self.rounds["annotated ids"] = len(body["memory_ids"])
        return outcomes


def inject_rounds(client: RoundClient, body: dict[str, Any]) -> dict[str, float]:
    """One inject by the memory service's code in this process: each round's wall ms, and
    the annotate calls alone for the pool's first ``CANDIDATES`` ids and for its whole pool."""
    client.rounds, client.pools = {}, []
    Inject(Search(client, GATED_FUSION)).inject(body)
    rounds = dict(client.rounds)
    for namespace, ids in client.pools[:1]:
        for size, chosen in (("top", ids[:CANDIDATES]), ("pool", ids)):
            coverage = [
                (
                    "lexicon",
                    "coverage",
                    {"query": body["prompt"], "namespace": namespace, "ids": part},
                )
                for part in chunks(chosen, COVERAGE_MAX_IDS)
            ]
            keys = [("graph", "memory_keys", {"namespace": namespace, "memory_ids": chosen})]
            for name, calls in (("lexicon.coverage", coverage), ("graph.memory_keys", keys)):
                started = time.perf_counter()
                client.call_many(calls)
                rounds[f"alone {name} {size}"] = (time.perf_counter() - started) * 1000
        rounds["pool size"] = len(ids)
    return rounds


def chunks(ids: list[str], size: int) -> list[list[str]]:
    return [ids[at : at + size] for at in range(0, len(ids), size)]


def prompt_texts(first: int = 1, count: int = PROMPTS) -> list[str]:
    """Prompts about the synthetic store's concepts, worded as a user would ask."""
    return [
        f"what do we know about {NAMESPACE} concept {j} and how it relates to {NAMESPACE} "
        f"concept {j + 7}?"
        for j in range(first, first + count)
    ]


def host_payload(prompt: str) -> bytes:
    return json.dumps(
        {
            "session_id": SESSION_ID,
            "cwd": PROJECT_DIR,
            "hook_event_name": "UserPromptSubmit",
            "prompt": prompt,
        }
    ).encode()


def spawn(argv: list[str], stdin: bytes, env: dict[str, str]) -> tuple[float, float, bytes]:
    """Wall ms, CPU ms (user + system) and stdout of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, input=stdin, capture_output=True, env=env, timeout=60, check=True)
    wall_ms = (time.perf_counter() - started) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_ms = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall_ms, cpu_ms, done.stdout


def probe_run(env: dict[str, str], stdin: bytes) -> tuple[float, float, dict[str, float], bytes]:
    """One probe run of the hook: when it was spawned and when it exited, the marks the probe
    took, and what it printed."""
    spawned_at = time.time()
    done = subprocess.run(
        [sys.executable, "-c", PROBE], input=stdin, capture_output=True, env=env, timeout=60
    )
    exited_at = time.time()
    marks = json.loads(done.stderr.decode().strip().splitlines()[-1])
    return spawned_at, exited_at, marks, done.stdout


def probe_phases(env: dict[str, str], stdin: bytes) -> dict[str, float]:
    """One probe run split into PHASES (ms)."""
    spawned_at, exited_at, marks, _ = probe_run(env, stdin)
    p0 = marks["p0"]

    def span(start: float, end: float) -> float:
        return round((end - start) * 1000, 2)

    return dict(
        zip(
            PHASES,
            (
                span(spawned_at, marks["started_at"]),
                span(p0, marks["imports"]),
                span(marks["imports"], marks["client_start"]),
                span(marks["client_start"], marks["client_end"]),
                span(marks["inject_start"], marks["inject_end"]),
                span(marks["inject_end"], marks["main_end"]),
                span(marks["finished_at"], exited_at),
            ),
            strict=True,
        )
    )


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered), 1),
        "p95_ms": round(ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], 1),
    }


def import_report(hook: list[str], env: dict[str, str], stdin: bytes) -> dict[str, Any]:
    """How many modules the hook imports, and those compiled from source (no usable .pyc)."""
    python, rest = hook_argv(hook)
    timed = subprocess.run(
        [python, "-X", "importtime", *rest], input=stdin, capture_output=True, env=env
    )
    verbose = subprocess.run([python, "-v", *rest], input=stdin, capture_output=True, env=env)
    modules = [
        line for line in timed.stderr.decode().splitlines() if line.startswith("import time:")
    ]
    from_source = [
        line.removeprefix("# code object from ")
        for line in verbose.stderr.decode().splitlines()
        if line.startswith("# code object from ") and not line.rstrip("'").endswith(".pyc")
    ]
    return {"modules": len(modules) - 1, "compiled_from_source": from_source}


def hook_argv(hook: list[str]) -> tuple[str, list[str]]:
    """The hook command as (interpreter, its arguments), to run it with extra flags."""
    if hook[0] == sys.executable:
        return hook[0], hook[1:]
    return sys.executable, hook


def deploy(deployment: BenchHome, store: Path) -> dict[str, Any]:
    """Put the store into the home, start keymem, wait until the lexicon serves every memory."""
    if store.is_dir():
        shutil.copytree(store, deployment.home, symlinks=True, dirs_exist_ok=True)
        shutil.rmtree(deployment.home / "run", ignore_errors=True)
    else:
        shutil.copy(store, graph_path(deployment.home))
    deployment.env["KEYMEM_HEARTBEAT_LIVENESS"] = LIVENESS  # a large store's long calls
    (deployment.home / "namespaces.json").write_text(json.dumps({PROJECT_DIR: NAMESPACE}))
    started = time.perf_counter()
    deployment.keymem("up", "--timeout", UP_TIMEOUT_S)
    up_s = time.perf_counter() - started
    with Client(ipc_endpoints(deployment.home).frontend) as client:
        memories = lexicon_caught_up(client)
    return {"memories": memories, "up_s": round(up_s, 1)}


def lexicon_caught_up(client: Client) -> int:
    """The memories the lexicon serves once it has caught up with the graph's feed (a worker
    busy indexing may not answer a poll in time, which only means not yet)."""
    give_up = time.monotonic() + LEXICON_WAIT_S
    while time.monotonic() < give_up:
        try:
            stats = client.call("lexicon", "index_stats", timeout_ms=2_000)
            if stats["sync"]["phase"] == "live" and stats["sync"]["synced"]:
                documents: int = stats["documents"]
                return documents
        except KeymemError:
            pass
        time.sleep(POLL_S)
    raise TimeoutError("the lexicon did not catch up with the graph in time")


def measure(store: Path, runs: int, installed: Path | None = None) -> dict[str, Any]:
    with bench_home("km-ho-") as deployment:
        report: dict[str, Any] = {"store": str(store), **deploy(deployment, store)}
        env = deployment.env
        hook = list(this_installation(load(env)).hook)
        namespaces = scope_of(PROJECT_DIR, deployment.home).namespaces
        bodies = [
            {"prompt": shorten(p), "namespaces": namespaces, "session_id": SESSION_ID}
            for p in prompt_texts()
        ]
        payloads = [host_payload(p) for p in prompt_texts()]
        floors: dict[str, list[str]] = {
            "python -I -S -c pass": [sys.executable, "-I", "-S", "-c", "pass"],
            "python -c pass": [sys.executable, "-c", "pass"],
            "import msgpack": [sys.executable, "-c", "import msgpack"],
            "import zmq, msgpack": [sys.executable, "-c", "import zmq, msgpack"],
        }
        hooks = {"hook": hook, "hook_pyzmq": [sys.executable, "-c", HOOK_PYZMQ]}
        if installed is not None:
            hooks["hook_installed"] = [str(installed / "bin" / HOOK_SCRIPT)]
            floors["installed python -c pass"] = [str(installed / "bin" / "python"), "-c", "pass"]
        walls: dict[str, list[float]] = {name: [] for name in (*hooks, "inject", *floors)}
        cpu: dict[str, list[float]] = {name: [] for name in hooks}
        answered = {name: 0 for name in hooks}
        phases: dict[str, list[float]] = {phase: [] for phase in PHASES}
        rounds: dict[str, list[float]] = {}
        fresh_rounds: dict[str, list[float]] = {}
        fresh = [
            {**bodies[0], "prompt": prompt}
            for prompt in prompt_texts(FRESH_FIRST, WARM_ROUNDS + runs)
        ]
        report["load_average_start"] = [round(x, 1) for x in os.getloadavg()]
        frontend = ipc_endpoints(deployment.home).frontend
        timed = RoundClient(frontend)
        with Client(frontend) as client, timed:
            for round_ in range(WARM_ROUNDS + runs):
                i = round_ % PROMPTS
                started = time.perf_counter()
                client.call("memory", "inject", bodies[i], timeout_ms=CALL_TIMEOUT_MS)
                inject_ms = (time.perf_counter() - started) * 1000
                spawned = {name: spawn(argv, payloads[i], env) for name, argv in hooks.items()}
                probed = probe_phases(env, payloads[i])
                floor_ms = {name: spawn(argv, b"", env)[0] for name, argv in floors.items()}
                rounds_ms = inject_rounds(timed, bodies[i])
                fresh_ms = inject_rounds(timed, fresh[round_])
                if round_ < WARM_ROUNDS:
                    continue
                for name, ms in rounds_ms.items():
                    rounds.setdefault(name, []).append(ms)
                for name, ms in fresh_ms.items():
                    fresh_rounds.setdefault(name, []).append(ms)
                walls["inject"].append(inject_ms)
                for name, (wall_ms, cpu_ms, out) in spawned.items():
                    walls[name].append(wall_ms)
                    cpu[name].append(cpu_ms)
                    answered[name] += bool(out)
                for phase, ms in probed.items():
                    phases[phase].append(ms)
                for name, ms in floor_ms.items():
                    walls[name].append(ms)
        report["load_average_end"] = [round(x, 1) for x in os.getloadavg()]
        report["hook_command"] = hook
        report["runs"] = runs
        report["hook_answered"] = answered
        report["wall"] = {name: summary(values) for name, values in walls.items()}
        report["cpu_p50_ms"] = {name: round(statistics.median(v), 1) for name, v in cpu.items()}
        report["overhead_p50_ms"] = round(
            report["wall"]["hook"]["p50_ms"] - report["wall"]["inject"]["p50_ms"], 1
        )
        report["phases_p50_ms"] = {p: round(statistics.median(v), 1) for p, v in phases.items()}
        for name, timed_rounds in (("", rounds), ("_fresh", fresh_rounds)):
            report[f"inject_rounds{name}_p50_ms"] = {
                round_name: round(statistics.median(v), 1) for round_name, v in timed_rounds.items()
            }
        report["imports"] = import_report(hook, env, payloads[0])
        return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--store", type=Path, default=Path("/tmp/km-scale5/store-10000/graph.duckdb")
    )
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument(
        "--installed", type=Path, help="a venv holding a user's install of keymem (pip install .)"
    )
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.store, args.runs, args.installed), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
