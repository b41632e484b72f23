"""The report's tables, built once from the collected report and drawn twice: with rich in the
terminal (each fits 100 columns) and as HTML tables in the page.

Per-bucket tables list only the buckets where something happened, so a month of quiet days
does not bury the busy ones.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table as RichTable

from keymem.services.report.collect import (
    HOOK_OUTCOMES,
    LEARNING_SERIES,
    WRITE_SERIES,
    bucket_label,
)

NO_VALUE = "-"
TERMINAL_COLUMNS = 100  # the terminal form's widest
# Short column names, so the learning table fits the terminal without cutting a cell.
LEARNING_LABELS = {"strengthened": "grown", "associated": "new links", "learned_aliases": "aliases"}
SLEEP_TIME_BUCKET_S = 60  # a sleep pass is shown to the minute


@dataclass(frozen=True)
class Table:
    title: str
    columns: Sequence[str]
    rows: list[list[str]]
    note: str = ""
    empty: str = "nothing recorded in this window"
    text_columns: int = 1  # the first columns hold text (left-aligned), the rest numbers


def count(value: float | None) -> str:
    return NO_VALUE if value is None else f"{value:,.0f}"


def ms(value: float | None) -> str:
    return NO_VALUE if value is None else f"{value:,.1f}"


def share(value: float | None) -> str:
    return NO_VALUE if value is None else f"{100 * value:.0f}%"


def _per_bucket(report: dict[str, Any], columns: dict[str, list[Any]]) -> list[list[Any]]:
    """(label, values...) for each bucket where any column is non-zero."""
    rows = []
    for i, label in enumerate(report["buckets"]):
        values = [series[i] if i < len(series) else 0 for series in columns.values()]
        if any(values):
            rows.append([label, *values])
    return rows


def store_tables(report: dict[str, Any]) -> list[Table]:
    store = report.get("store")
    if store is None:
        note = report.get("store_error", "")
        return [Table("Store", ("namespace", "memories"), [], note, "store not reachable")]
    ns_rows = []
    for ns, row in sorted(store["namespaces"].items(), key=lambda item: -item[1]["memories"]):
        aging = row["aging"] + row["stale"]
        ns_rows.append(
            [
                ns,
                count(row["memories"]),
                count(sum(row["growth"]["new"])),
                count(row["fresh"]),
                count(row["aging"]),
                count(row["stale"]),
                share(aging / row["memories"] if row["memories"] else None),
            ]
        )
    key_rows = [
        [kind, count(row["keys"]), count(sum(row["new"]))]
        for kind, row in store["key_types"].items()
    ]
    hub_rows = [
        [
            hub["concept"][:40],
            hub["namespace"][:20],
            count(hub["memories"]),
            count(sum(hub["growth"]["new"])),
            "yes" if hub["is_hub"] else "",
        ]
        for hub in store["hubs"]
    ]
    links = store["links"]
    return [
        Table(
            "Memories by namespace (active; +new in this window)",
            ("namespace", "memories", "+new", "fresh", "aging", "stale", "aging+stale"),
            ns_rows,
        ),
        Table("Keys by type", ("type", "keys", "+new"), key_rows),
        Table(
            "Busiest keys",
            ("key", "namespace", "memories", "+new", "hub"),
            hub_rows,
            f"a hub has {store['hub_min_links']}+ memories; links: {count(links['total'])} "
            f"({count(links['auto'])} auto-keyed, {count(links['learned'])} learned)",
            text_columns=2,
        ),
    ]


def activity_tables(report: dict[str, Any]) -> list[Table]:
    hook, latency = report["hook"], report["latency"]
    writes = _per_bucket(report, report["writes"])
    hook_rows = _per_bucket(
        report,
        {
            **{o: hook[o] for o in HOOK_OUTCOMES},
            "p50": latency["inject"]["p50"],
            "p95": latency["inject"]["p95"],
        },
    )
    recall = latency["recall"]
    search = latency["search"]
    recall_rows = _per_bucket(
        report,
        {
            "recall": recall["n"],
            "r50": recall["p50"],
            "r95": recall["p95"],
            "search": search["n"],
            "s50": search["p50"],
            "s95": search["p95"],
        },
    )
    learning = _per_bucket(report, report["learning"])
    abstention = report["abstention"]
    return [
        Table(
            "Writes",
            ("bucket", *WRITE_SERIES),
            [[label, *map(count, values)] for label, *values in writes],
        ),
        Table(
            "Hook (inject)",
            ("bucket", *HOOK_OUTCOMES, "silent %", "p50 ms", "p95 ms"),
            [
                [
                    label,
                    *map(count, (shown, silent, failed)),
                    share(silent / (shown + silent) if shown + silent else None),
                    ms(p50),
                    ms(p95),
                ]
                for label, shown, silent, failed, p50, p95 in hook_rows
            ],
            f"silence share {share(hook['silence_share'])}, failed share "
            f"{share(hook['failed_share'])}; latency is the memory service's, "
            f"p50 {ms(latency['inject']['all']['p50'])} / p95 "
            f"{ms(latency['inject']['all']['p95'])} ms overall",
        ),
        Table(
            "Recall and search",
            ("bucket", "recalls", "p50 ms", "p95 ms", "searches", "p50 ms", "p95 ms"),
            [
                [label, count(rn), ms(r50), ms(r95), count(sn), ms(s50), ms(s95)]
                for label, rn, r50, r95, sn, s50, s95 in recall_rows
            ],
            f"abstained: recall {share(abstention['recall']['share'])} of "
            f"{count(abstention['recall']['n'])}, search "
            f"{share(abstention['search']['share'])} of {count(abstention['search']['n'])}",
        ),
        Table(
            "Learning from reads",
            ("bucket", *(LEARNING_LABELS.get(name, name) for name in LEARNING_SERIES)),
            [[label, *map(count, values)] for label, *values in learning],
            "grown, decayed: link weights Hebbian learning moved; new links: associations a "
            "read taught; aliases: queries promoted to learned key aliases",
        ),
    ]


def sleep_table(report: dict[str, Any]) -> Table:
    fields = sorted({k for event in report["sleep"] for k in event if k != "t"})
    rows = [
        [
            bucket_label(event["t"], SLEEP_TIME_BUCKET_S),
            *(str(event.get(n, NO_VALUE)) for n in fields),
        ]
        for event in report["sleep"]
    ]
    return Table("Sleep passes", ("at", *fields), rows, empty="no sleep pass in this window")


def sections(report: dict[str, Any]) -> list[Table]:
    return [*store_tables(report), *activity_tables(report), sleep_table(report)]


def render_terminal(tables: list[Table], console: Console) -> None:
    for table in tables:
        drawn = RichTable(title=table.title, title_justify="left", title_style="bold")
        if table.rows:
            for position, name in enumerate(table.columns):
                text = position < table.text_columns
                drawn.add_column(name, justify="left" if text else "right", no_wrap=True)
            for row in table.rows:
                drawn.add_row(*row)
        else:
            drawn.show_header = False
            drawn.add_column(table.empty)
            drawn.add_row(table.empty)
        console.print(drawn)
        if table.note:
            console.print(table.note, style="dim")


def render_html(table: Table) -> str:
    def cell(tag: str, position: int, text: str) -> str:
        kind = "text" if position < table.text_columns else "num"
        return f"<{tag} class='{kind}'>{html.escape(text)}</{tag}>"

    head = "".join(cell("th", i, name) for i, name in enumerate(table.columns))
    body = "".join(
        "<tr>" + "".join(cell("td", i, text) for i, text in enumerate(row)) + "</tr>"
        for row in table.rows
    )
    if not table.rows:
        body = f'<tr><td colspan="{len(table.columns)}">{html.escape(table.empty)}</td></tr>'
    note = f"<p class='note'>{html.escape(table.note)}</p>" if table.note else ""
    return (
        f"<h3>{html.escape(table.title)}</h3><table><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table>{note}"
    )
