"""A day of simulated traffic through a real deployment, then ``keymem report`` on it.

A fresh KEYMEM_HOME gets ``keymem up``; then a simulated day plays hour by hour: an agent's
writes, corrections and forgets, recalls and searches, reads of what the hook surfaced (which
teach the graph), confirmations and dismissals through the memory service (the path the MCP
tools take), and prompts through the real ``keymem-hook`` process fed UserPromptSubmit JSON,
more of them in working hours than at night. Events carry the server's clock only, so the day
is compressed: one simulated hour lasts ``--hour-seconds`` (default 60), and ``keymem report
--bucket minute`` shows the day one bucket per simulated hour. Nothing is backdated.

    nice -n 10 .venv/bin/python -m benchmarks.traffic_day --html day.html

prints what was sent, the hook's end-to-end p50/p95 (process start to exit, as the host waits
for it), how many plots the page has, and writes the page. docs/BENCHMARKS.md has the figures.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.deployment import BenchHome, bench_home
from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints

PROJECT_DIR = "/work/shop"
PROJECT_NAMESPACE = "shop"
SESSION_ID = "traffic-day"
CALL_TIMEOUT_MS = 30_000
HOOK_TIMEOUT_S = 60
SEED = 16
# Prompts per simulated hour, midnight first: quiet nights, a busy morning and afternoon.
HOURLY_PROMPTS = (0, 0, 0, 0, 0, 1, 2, 4, 6, 6, 5, 3, 2, 4, 6, 5, 4, 3, 2, 2, 1, 1, 0, 0)
READ_SHARE = 0.6  # of surfaced memories, the share the agent then reads
HOOK_ID = re.compile(r"\[([0-9a-f]{12}) rel=")
PNG_IMAGE = re.compile(r'<img[^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"')

# (namespace, content, keys): what the agent writes over the day, in order.
FACTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("default", "The user prefers tea over coffee in the afternoon", ("tea", "coffee")),
    (
        "default",
        "The user's daughter is called Mina and loves strawberries",
        ("Mina", "strawberry"),
    ),
    ("default", "The user runs every Tuesday and Thursday morning", ("running", "schedule")),
    ("default", "The user is allergic to peanuts", ("allergy", "peanut")),
    ("shop", "The shop's checkout service is written in Go 1.22", ("checkout", "Go")),
    ("shop", "Deploys of the shop go through the staging cluster first", ("deploy", "staging")),
    (
        "shop",
        "The shop's database is PostgreSQL 16 on the db-main host",
        ("database", "PostgreSQL"),
    ),
    ("shop", "Payment provider for the shop is Stripe", ("payment", "Stripe")),
    ("shop", "The shop's search uses OpenSearch with a nightly reindex", ("search", "OpenSearch")),
    ("shop", "Release notes for the shop live in docs/releases", ("release", "docs")),
    ("default", "The user's editor is Neovim with the lazy.nvim plugin manager", ("editor",)),
    ("shop", "The shop's CI runs on GitHub Actions with a 20 minute limit", ("CI", "GitHub")),
    ("default", "The user's favourite fruit is the strawberry", ("fruit", "strawberry")),
    ("shop", "The checkout service talks to payment over gRPC", ("checkout", "gRPC", "payment")),
    ("shop", "On-call for the shop rotates weekly on Mondays", ("on-call", "rotation")),
    ("default", "The user speaks Korean and English", ("language", "Korean")),
)
# Prompts that name what a fact holds, and prompts about nothing stored.
HIT_PROMPTS = (
    "what does the user like to drink in the afternoon, tea or coffee?",
    "which language is the checkout service written in?",
    "how do we deploy the shop, through staging?",
    "which database does the shop use and on which host?",
    "who is the payment provider for the shop?",
    "is the user allergic to anything like peanuts?",
    "what fruit does Mina love?",
    "how long can a CI run take on GitHub Actions for the shop?",
)
MISS_PROMPTS = (
    "write a haiku about the sea in winter",
    "explain the difference between TCP and UDP",
    "what is the capital of Portugal?",
    "refactor this loop into a list comprehension please",
)
RECALL_QUERIES = ("strawberry", "checkout", "deploy", "tea", "payment", "quantum chromodynamics")


@dataclass
class Tally:
    sent: Counter[str] = field(default_factory=Counter)
    hook_ms: list[float] = field(default_factory=list)
    hook_outcomes: Counter[str] = field(default_factory=Counter)
    behind_s: float = 0.0  # how far the day fell behind its clock (a loaded box)


def run_hook(bench: BenchHome, prompt: str) -> tuple[list[str], float]:
    """The real hook process; the memory ids it surfaced and its wall time in ms."""
    payload = {
        "session_id": SESSION_ID,
        "hook_event_name": "UserPromptSubmit",
        "cwd": PROJECT_DIR,
        "prompt": prompt,
    }
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "keymem.hooks.prompt_submit"],
        input=json.dumps(payload).encode(),
        env=bench.env,
        capture_output=True,
        timeout=HOOK_TIMEOUT_S,
        check=True,
    )
    elapsed_ms = (time.perf_counter() - started) * 1000
    if not done.stdout.strip():
        return [], elapsed_ms
    context = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    return HOOK_ID.findall(context), elapsed_ms


class Agent:
    """What an agent does through the memory service (the MCP tools' path)."""

    def __init__(self, client: Client, tally: Tally, rng: random.Random) -> None:
        self.client, self.tally, self.rng = client, tally, rng
        self.saved: list[tuple[str, str]] = []  # (memory id, namespace)

    def call(self, method: str, body: dict[str, Any]) -> Any:
        self.tally.sent[method] += 1
        return self.client.call("memory", method, body, timeout_ms=CALL_TIMEOUT_MS)

    def remember(self, namespace: str, content: str, keys: tuple[str, ...]) -> None:
        saved = self.call(
            "remember", {"content": content, "keys": list(keys), "namespace": namespace}
        )
        self.saved.append((saved["saved"], namespace))

    def read(self, memory_id: str, namespace: str) -> dict[str, Any]:
        body = {"memory_id": memory_id, "namespace": namespace, "session_id": SESSION_ID}
        reply: dict[str, Any] = self.call("read_memory", body)
        return reply

    def judge(self, read: dict[str, Any]) -> None:
        """Now and then confirm what was read, or dismiss the key it came by."""
        memory = read["memory"]
        roll = self.rng.random()
        if roll < 0.2:
            body = {"memory_id": memory["id"], "namespace": memory["namespace"], "evidence": "user"}
            self.call("confirm_memory", body)
        elif roll < 0.3 and memory["keys"]:
            key_id = memory["keys"][-1]["key_id"]
            body = {"memory_id": memory["id"], "namespace": memory["namespace"], "key_id": key_id}
            self.call("dismiss", body)

    def prompt(self, bench: BenchHome, text: str) -> None:
        shown, elapsed_ms = run_hook(bench, text)
        self.tally.hook_ms.append(elapsed_ms)
        self.tally.hook_outcomes["shown" if shown else "silent"] += 1
        for memory_id in shown:
            if self.rng.random() < READ_SHARE:
                namespace = next((ns for mid, ns in self.saved if mid == memory_id), None)
                if namespace is not None:
                    self.judge(self.read(memory_id, namespace))

    def revise(self) -> None:
        """Correct one memory, forget another: the day's edits."""
        memory_id, namespace = self.saved.pop(0)
        corrected = self.call(
            "correct",
            {
                "memory_id": memory_id,
                "namespace": namespace,
                "content": "The user prefers green tea over coffee in the afternoon",
            },
        )
        self.saved.append((corrected["new_id"], namespace))
        memory_id, namespace = self.saved.pop(self.rng.randrange(len(self.saved)))
        self.call("forget", {"memory_id": memory_id, "namespace": namespace})


def play_day(bench: BenchHome, hours: int, hour_seconds: float) -> Tally:
    """``hours`` simulated hours (from 06:00 when fewer than 24), ``hour_seconds`` each."""
    (bench.home / "namespaces.json").write_text(json.dumps({PROJECT_DIR: PROJECT_NAMESPACE}))
    rng = random.Random(SEED)
    tally = Tally()
    first_hour = 0 if hours >= len(HOURLY_PROMPTS) else 6
    facts = list(FACTS)
    with Client(ipc_endpoints(bench.home).frontend, timeout_ms=CALL_TIMEOUT_MS) as client:
        agent = Agent(client, tally, rng)
        day_start = time.monotonic()
        for step in range(hours):
            hour = (first_hour + step) % len(HOURLY_PROMPTS)
            prompts = HOURLY_PROMPTS[hour]
            writes = max(1, len(FACTS) // hours) if facts else 0
            for _ in range(min(writes, len(facts))):
                agent.remember(*facts.pop(0))
            for _ in range(prompts):
                pool = HIT_PROMPTS if rng.random() < 0.7 else MISS_PROMPTS
                agent.prompt(bench, rng.choice(pool))
            for _ in range((prompts + 1) // 2):
                namespace = rng.choice(("default", PROJECT_NAMESPACE))
                method = rng.choice(("recall", "search"))
                agent.call(method, {"query": rng.choice(RECALL_QUERIES), "namespace": namespace})
            if step == hours // 2 and len(agent.saved) > 2:
                agent.revise()
            hour_end = day_start + (step + 1) * hour_seconds
            wait = hour_end - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            else:
                tally.behind_s = -wait
    return tally


def png_images(page: str) -> list[bytes]:
    """The PNG plots embedded in a report page."""
    return [base64.b64decode(data) for data in PNG_IMAGE.findall(page)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=int, default=len(HOURLY_PROMPTS))
    parser.add_argument("--hour-seconds", type=float, default=60.0)
    parser.add_argument("--html", type=Path, default=Path("traffic_day.html"))
    args = parser.parse_args(argv)
    with bench_home("kmday-") as bench:
        bench.keymem("up")
        started = time.monotonic()
        tally = play_day(bench, args.hours, args.hour_seconds)
        played_s = time.monotonic() - started
        time.sleep(2)  # the journals flush every second
        report_started = time.perf_counter()
        bench.keymem("report", "--bucket", "minute", "--html", str(args.html.resolve()))
        report_s = time.perf_counter() - report_started
        collected = json.loads(bench.keymem("report", "--bucket", "minute", "--json").stdout)
    hook = np.asarray(tally.hook_ms)
    print(
        f"played {args.hours} simulated hours in {played_s:.0f} s "
        f"(behind by {tally.behind_s:.1f} s)"
    )
    print("sent:", dict(sorted(tally.sent.items())), "hook:", dict(tally.hook_outcomes))
    if hook.size:
        print(
            f"hook end to end: p50 {np.percentile(hook, 50):.0f} ms, "
            f"p95 {np.percentile(hook, 95):.0f} ms over {hook.size} prompts"
        )
    latency = collected["latency"]
    for method in ("inject", "recall", "search"):
        whole = latency[method]["all"]
        print(
            f"{method} (memory service): n {whole['n']}, "
            f"p50 {whole['p50']} ms, p95 {whole['p95']} ms"
        )
    print(f"silence share {collected['hook']['silence_share']}")
    plots = png_images(args.html.read_text())
    print(
        f"report --html: {len(plots)} plots, "
        f"{args.html.stat().st_size / 1024:.0f} KiB, {report_s:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
