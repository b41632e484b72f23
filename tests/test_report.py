"""``keymem report`` as a user runs it: the CLI in a subprocess over a real graph file and real
journal day files (keymem down: the report reads the file itself), and in the slow test over a
real deployment after a stretch of the simulated day (benchmarks/traffic_day.py)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from benchmarks.deployment import bench_home
from benchmarks.traffic_day import play_day, png_images
from keymem.services.journal import Journal
from tests.graph_helpers import key_id_of, open_graph
from tests.vectors import remember_body

MIN_PLOTS = 5
TERMINAL_COLUMNS = 100
EXTERNAL_REFERENCE = re.compile(r"(https?:|//[a-z]|src=\"(?!data:)|<script|<link)", re.IGNORECASE)
EMBEDDED_DATA = re.compile(r"data:image/png;base64,[A-Za-z0-9+/=]+")


def outside_references(page: str) -> list[str]:
    """What in the page could reach past the file (its embedded images left out)."""
    return EXTERNAL_REFERENCE.findall(EMBEDDED_DATA.sub("data:", page))


def keymem(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYMEM_")}
    env.update(KEYMEM_HOME=str(home), COLUMNS="200")  # a wide terminal must not widen it
    return subprocess.run(
        [sys.executable, "-m", "keymem.services.cli", "report", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with two namespaces, a hub and some learning, and a journal of traffic."""
    home = tmp_path_factory.mktemp("report")
    graph = open_graph(home)
    for i in range(12):
        namespace = "shop" if i % 3 else "default"
        keys = ["deploy", f"service {i % 4}"] if namespace == "shop" else ["tea", f"day {i}"]
        graph.remember(
            remember_body(f"fact {i}: about {keys[0]} and {keys[1]}", keys, namespace=namespace)
        )
    memory_id = next(iter(graph.state.memories))
    tea = key_id_of(graph, "tea")
    graph.read_memory({"memory_id": memory_id, "via_key_id": tea})
    graph.close()
    memory = Journal(home, "memory")
    rng = np.random.default_rng(16)
    for i in range(60):
        memory.record(
            "inject", ms=float(rng.uniform(20, 90)), outcome="silent" if i % 3 else "shown"
        )
        memory.record("recall", ms=float(rng.uniform(10, 40)), found=1, abstained=i % 5 == 0)
    memory.flush()
    logs = home / "logs"
    logs.mkdir()
    (logs / "hook-failures.log").write_text(json.dumps({"at": time.time(), "reason": "x"}) + "\n")
    return home


def nonblank_plots(page: str) -> list[np.ndarray]:
    """The page's PNGs that decode and have more than one colour."""
    images = [imread(io.BytesIO(png), format="png") for png in png_images(page)]
    return [image for image in images if float(image.std()) > 0]


def test_the_terminal_report_fits_100_columns_and_cuts_nothing(home: Path) -> None:
    out = keymem(home).stdout
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= TERMINAL_COLUMNS
    assert "…" not in out  # no cell was cut to make it fit
    assert "Memories by namespace" in out and "Hook (inject)" in out
    shop = next(line for line in lines if line.startswith("│ shop"))
    assert "8" in shop.split("│")[2]  # 8 of the 12 memories are in shop


def test_the_json_report_counts_what_happened(home: Path) -> None:
    report = json.loads(keymem(home, "--json").stdout)
    hook = report["hook"]
    assert (sum(hook["shown"]), sum(hook["silent"]), sum(hook["failed"])) == (20, 40, 1)
    assert hook["silence_share"] == pytest.approx(40 / 60, abs=1e-3)
    assert report["abstention"]["recall"] == {"share": 0.2, "n": 60}
    assert sum(report["writes"]["remembered"]) == 12
    assert sum(report["learning"]["read"]) == 1
    assert report["store"]["namespaces"]["shop"]["memories"] == 8
    assert report["store"]["hubs"][0]["concept"] == "deploy"
    inject = report["latency"]["inject"]["all"]
    assert 20 <= inject["p50"] <= inject["p95"] <= 90


def test_the_html_page_has_plots_and_no_outside_reference(home: Path, tmp_path: Path) -> None:
    target = tmp_path / "r.html"
    keymem(home, "--html", str(target))
    page = target.read_text()
    assert len(nonblank_plots(page)) >= MIN_PLOTS
    assert outside_references(page) == []
    assert target.stat().st_mode & 0o777 == 0o600


def test_a_bad_window_is_a_usage_error(home: Path) -> None:
    with pytest.raises(subprocess.CalledProcessError) as failed:
        keymem(home, "--since", "30 days")
    assert failed.value.returncode == 2
    assert "not a window like" in failed.value.stderr


@pytest.mark.slow
@pytest.mark.supervised
def test_a_stretch_of_simulated_traffic_makes_a_page_with_plots(tmp_path: Path) -> None:
    with bench_home("kmrep-") as bench:
        bench.keymem("up")
        tally = play_day(bench, hours=3, hour_seconds=5.0)
        time.sleep(2)  # the journals flush every second
        target = tmp_path / "day.html"
        bench.keymem("report", "--html", str(target))
        report = json.loads(bench.keymem("report", "--json").stdout)
    page = target.read_text()
    assert len(nonblank_plots(page)) >= MIN_PLOTS
    assert outside_references(page) == []
    hook = report["hook"]
    assert sum(hook["shown"]) == tally.hook_outcomes["shown"]
    assert sum(hook["silent"]) == tally.hook_outcomes["silent"]
    assert sum(report["writes"]["remembered"]) == tally.sent["remember"]
    assert report["latency"]["inject"]["all"]["n"] == sum(tally.hook_outcomes.values())
