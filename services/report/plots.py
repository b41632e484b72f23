"""The report's plots as PNG bytes: matplotlib ``Figure`` objects drawn by its Agg canvas
(no pyplot, no display, no global state).

Each plot is a function of the collected report; a plot without data still draws its axes
with a "nothing recorded" note, so the page's layout does not depend on the traffic. PNGs carry
no metadata (matplotlib would write its web address into them).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

FIGURE_SIZE_IN = (9.0, 3.4)
DPI = 100
TOP_SERIES = 6  # namespaces, hubs: the largest this many, the rest left out
LABELS_SHOWN = 12  # x tick labels per axis at most
HOOK_COLOURS = {"shown": "#2e7d32", "silent": "#9e9e9e", "failed": "#c62828"}
VALIDITY_COLOURS = {"fresh": "#2e7d32", "aging": "#f9a825", "stale": "#c62828"}

Plot = Callable[[dict[str, Any], Axes], bool]


def _fit(values: Sequence[Any], length: int) -> list[Any]:
    """A graph-side series cut or padded to the report's bucket count (their clocks differ)."""
    return [*values[:length], *[0] * (length - len(values))]


def _cumulative(before: int, new: Sequence[int], length: int) -> list[int]:
    total, out = before, []
    for value in _fit(new, length):
        total += value
        out.append(total)
    return out


def _x_axis(ax: Axes, labels: list[str]) -> None:
    step = max(1, len(labels) // LABELS_SHOWN)
    ax.set_xticks(range(0, len(labels), step))
    ax.set_xticklabels(labels[::step], rotation=30, ha="right", fontsize=8)


def growth(report: dict[str, Any], ax: Axes) -> bool:
    store, labels = report.get("store"), report["buckets"]
    ax.set_title("Memories held, by namespace (cumulative)")
    if not store or not store["namespaces"]:
        return False
    ranked = sorted(store["namespaces"].items(), key=lambda item: -item[1]["memories"])
    for ns, row in ranked[:TOP_SERIES]:
        growth = row["growth"]
        ax.plot(_cumulative(growth["before"], growth["new"], len(labels)), label=ns)
    _x_axis(ax, labels)
    ax.legend(fontsize=8, loc="upper left")
    return True


def key_types(report: dict[str, Any], ax: Axes) -> bool:
    store, labels = report.get("store"), report["buckets"]
    ax.set_title("Keys, by type (cumulative)")
    if not store or not any(row["keys"] for row in store["key_types"].values()):
        return False
    for kind, row in store["key_types"].items():
        ax.plot(_cumulative(row["before"], row["new"], len(labels)), label=kind)
    _x_axis(ax, labels)
    ax.legend(fontsize=8, loc="upper left")
    return True


def validity(report: dict[str, Any], ax: Axes) -> bool:
    store = report.get("store")
    ax.set_title("Validity of active memories, by namespace (share)")
    rows = [(ns, r) for ns, r in (store or {}).get("namespaces", {}).items() if r["memories"]]
    if not rows:
        return False
    rows = sorted(rows, key=lambda item: -item[1]["memories"])[:TOP_SERIES]
    left = [0.0] * len(rows)
    for status, colour in VALIDITY_COLOURS.items():
        shares = [r[status] / r["memories"] for _, r in rows]
        ax.barh([ns for ns, _ in rows], shares, left=left, color=colour, label=status)
        left = [a + b for a, b in zip(left, shares, strict=True)]
    ax.set_xlim(0, 1)
    ax.legend(fontsize=8, loc="lower right")
    return True


def hubs(report: dict[str, Any], ax: Axes) -> bool:
    store, labels = report.get("store"), report["buckets"]
    ax.set_title("Busiest keys: memories filed under each (cumulative)")
    if not store or not store["hubs"]:
        return False
    for hub in store["hubs"][:TOP_SERIES]:
        growth = hub["growth"]
        label = f"{hub['concept'][:24]} ({hub['namespace'][:12]})"
        ax.plot(_cumulative(growth["before"], growth["new"], len(labels)), label=label)
    _x_axis(ax, labels)
    ax.legend(fontsize=8, loc="upper left")
    return True


def hook(report: dict[str, Any], ax: Axes) -> bool:
    labels, outcomes = report["buckets"], report["hook"]
    ax.set_title("Hook: prompts with memories shown, silent, failed")
    if not any(sum(outcomes[o]) for o in HOOK_COLOURS):
        return False
    bottom = [0.0] * len(labels)
    for outcome, colour in HOOK_COLOURS.items():
        values = outcomes[outcome]
        ax.bar(range(len(labels)), values, bottom=bottom, color=colour, label=outcome)
        bottom = [a + b for a, b in zip(bottom, values, strict=True)]
    _x_axis(ax, labels)
    ax.legend(fontsize=8, loc="upper left")
    return True


def latency(report: dict[str, Any], ax: Axes) -> bool:
    labels = report["buckets"]
    ax.set_title("Latency p50 (solid) and p95 (dashed), ms")
    drawn = False
    for method, series in report["latency"].items():
        if not series["all"]["n"]:
            continue
        nan = float("nan")
        p50 = [nan if v is None else v for v in series["p50"]]
        p95 = [nan if v is None else v for v in series["p95"]]
        (line,) = ax.plot(p50, marker=".", label=f"{method} p50")
        ax.plot(p95, linestyle="--", color=line.get_color(), label=f"{method} p95")
        drawn = True
    if drawn:
        _x_axis(ax, labels)
        ax.legend(fontsize=8, loc="upper left", ncol=2)
    return drawn


def learning(report: dict[str, Any], ax: Axes) -> bool:
    labels, series = report["buckets"], report["learning"]
    ax.set_title("What reading taught: links strengthened, decayed, associated")
    names = ("strengthened", "decayed", "associated")
    if not any(sum(series[name]) for name in names):
        return False
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        ax.bar([x + i * width for x in range(len(labels))], series[name], width, label=name)
    _x_axis(ax, labels)
    ax.legend(fontsize=8, loc="upper left")
    return True


def activity(report: dict[str, Any], ax: Axes) -> bool:
    labels = report["buckets"]
    ax.set_title("Writes and reads")
    series = {**report["writes"], **report["reads"]}
    shown = {name: values for name, values in series.items() if sum(values)}
    if not shown:
        return False
    for name, values in shown.items():
        ax.plot(values, marker=".", label=name)
    _x_axis(ax, labels)
    ax.legend(fontsize=8, loc="upper left", ncol=2)
    return True


# (section anchor, plot) in page order
PLOTS: tuple[tuple[str, Plot], ...] = (
    ("growth", growth),
    ("key-types", key_types),
    ("validity", validity),
    ("hubs", hubs),
    ("activity", activity),
    ("hook", hook),
    ("latency", latency),
    ("learning", learning),
)


def render(plot: Plot, report: dict[str, Any]) -> bytes:
    figure = Figure(figsize=FIGURE_SIZE_IN, dpi=DPI)
    ax = figure.add_subplot()
    if not plot(report, ax):
        ax.text(0.5, 0.5, "nothing recorded in this window", ha="center", va="center")
        ax.set_xticks([])
        ax.set_yticks([])
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format="png", metadata={"Software": None})
    return out.getvalue()
