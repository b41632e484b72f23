"""The report as one self-contained HTML file: inline CSS, PNG plots as data: URIs, no script
and no external reference, so it opens offline and can be mailed as it is."""

from __future__ import annotations

import base64
import html
from datetime import UTC, datetime
from typing import Any

from keymem.services.report import plots
from keymem.services.report.tables import Table, render_html

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 960px; color: #222; }
h1 { font-size: 1.5em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
h3 { font-size: 1em; margin-bottom: .3em; }
table { border-collapse: collapse; margin: .5em 0; font-variant-numeric: tabular-nums; }
th, td { padding: 2px 10px; border-bottom: 1px solid #eee; }
.num { text-align: right; } .text { text-align: left; }
.note { color: #666; font-size: .9em; margin-top: 0; }
img { max-width: 100%; }
"""


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _image(report: dict[str, Any], anchor: str, plot: plots.Plot) -> str:
    encoded = base64.b64encode(plots.render(plot, report)).decode("ascii")
    return f'<img id="plot-{anchor}" alt="{anchor}" src="data:image/png;base64,{encoded}">'


def page(report: dict[str, Any], tables: list[Table]) -> str:
    bucket = report["bucket_s"]
    width = f"{bucket // 86_400} day" if bucket >= 86_400 else f"{bucket // 60} min"
    header = (
        f"<h1>keymem report</h1><p class='note'>{html.escape(report['home'])} · from "
        f"{_stamp(report['start'])} to {_stamp(report['generated_at'])} · one bucket = {width}"
        "</p>"
    )
    figures = "".join(
        f"<h2 id='{anchor}'>{html.escape(anchor.replace('-', ' ').capitalize())}</h2>"
        + _image(report, anchor, plot)
        for anchor, plot in plots.PLOTS
    )
    body = header + figures + "<h2>Tables</h2>" + "".join(render_html(t) for t in tables)
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>keymem report</title><style>{STYLE}</style></head><body>{body}</body></html>"
    )
