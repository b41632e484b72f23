"""The eval's output: a summary table, a per-type table, the not-found rate — or all of it as JSON.

The tables are laid out like ../shared/data/BASELINES.md (same columns, three decimals, all@K
with recall@K in brackets per type), so a run's rows can be read against that file line by line.
"""

from __future__ import annotations

from typing import Any

from keymem.services.evaluation.runner import EvalResult, MethodResult

HEADLINE_K = 5  # the per-type table's k when asked for (BASELINES.md uses 5)
UNAVAILABLE = "n/a"


def headline_k(ks: tuple[int, ...]) -> int:
    return HEADLINE_K if HEADLINE_K in ks else ks[len(ks) // 2]


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _rule(columns: int, text_columns: int = 1) -> str:
    return _row(["---"] * text_columns + ["---:"] * (columns - text_columns))


def _ms(method: MethodResult) -> str:
    median = method.median_ms
    return UNAVAILABLE if median is None else f"{median:.2f}"


def summary_table(result: EvalResult) -> list[str]:
    ks = result.ks
    header = (
        ["method"]
        + [f"recall@{k}" for k in ks]
        + [f"all@{k}" for k in ks]
        + [f"hit@{k}" for k in ks]
        + ["MRR", "median ms/query"]
    )
    lines = [_row(header), _rule(len(header))]
    for method in result.methods:
        if method.unavailable is not None:
            lines.append(_row([method.name] + [UNAVAILABLE] * (len(header) - 1)))
            continue
        scores = method.sheet.summary()
        cells = [method.name]
        cells += [f"{scores.recall[k]:.3f}" for k in ks]
        cells += [f"{scores.all[k]:.3f}" for k in ks]
        cells += [f"{scores.hit[k]:.3f}" for k in ks]
        cells += [f"{scores.mrr:.3f}", _ms(method)]
        lines.append(_row(cells))
    return lines


def type_table(result: EvalResult) -> list[str]:
    k = headline_k(result.ks)
    available = [m for m in result.methods if m.unavailable is None]
    types = sorted({t for m in available for t in m.sheet.types()})
    header = ["type", "n", *(m.name for m in result.methods)]
    lines = [f"all@{k} by type (recall@{k} in brackets):", "", _row(header), _rule(len(header))]
    for kind in types:
        counts = {m.sheet.summary(kind).queries for m in available}
        cells = [kind, "/".join(str(c) for c in sorted(counts))]
        for method in result.methods:
            if method.unavailable is not None:
                cells.append(UNAVAILABLE)
                continue
            scores = method.sheet.summary(kind)
            cells.append(f"{scores.all[k]:.2f} ({scores.recall[k]:.2f})")
        lines.append(_row(cells))
    return lines


def _not_found_line(result: EvalResult) -> str:
    found = result.inject
    if found.queries == 0:
        return "not-found rate (inject, gold: []): no such queries in this file"
    if found.unavailable is not None:
        return (
            f"not-found rate (inject, {found.queries} queries with gold: []): "
            f"unavailable — {found.unavailable}"
        )
    rate = found.rate
    shown = UNAVAILABLE if rate is None else f"{rate:.3f}"
    errors = f", {found.errors} failed calls" if found.errors else ""
    return (
        f"not-found rate (inject surfaced nothing, {found.queries} queries with gold: []): "
        f"{shown} ({found.silent}/{found.queries - found.errors}{errors})"
    )


def _share(hits: int, asked: int) -> str:
    return f"{hits / asked:.3f} ({hits}/{asked})" if asked else UNAVAILABLE


def _gold_shown_lines(result: EvalResult) -> list[str]:
    """How often inject's few memories include a gold one, where there is one to show."""
    found = result.inject
    if found.unavailable is not None or not found.answered:
        return []
    lines = [f"inject showed a gold memory on answerable queries: {_share(*found.gold_shown())}"]
    lines += [f"  {kind}: {_share(*found.gold_shown(kind))}" for kind in sorted(found.answered)]
    return lines


def render_text(result: EvalResult) -> str:
    bench = result.benchmark
    scored = sum(1 for q in bench.queries if q.answerable)
    lines = [
        f"# {bench.name}  ({bench.setting}, {len(bench.memories)} memories, "
        f"{scored} scored queries, {len(bench.queries) - scored} with empty gold)",
        f"file: {result.source}; keys: {result.key_mode}; bm25 tokens: {result.tokenization}",
    ]
    if result.store is not None:
        store = result.store
        notes = [f"loaded {store.written} memories in {store.seconds:.1f} s"]
        if store.keyless:
            notes.append(f"{store.keyless} without keys")
        if store.truncated:
            notes.append(f"{store.truncated} cut to the graph's content limit")
        if store.merged:
            notes.append(f"{store.merged} exact duplicates merged by the graph")
        lines.append("; ".join(notes))
    lines += ["", *summary_table(result), "", *type_table(result), "", _not_found_line(result)]
    lines += _gold_shown_lines(result)
    for method in result.methods:
        if method.unavailable is not None:
            lines.append(f"{method.name}: unavailable — {method.unavailable}")
        if method.errors:
            lines.append(
                f"{method.name}: {method.errors} queries failed (scored as misses); "
                f"first: {method.first_error}"
            )
    lines.append(f"wall time: {result.wall_s:.1f} s")
    return "\n".join(lines)


def to_json(result: EvalResult) -> dict[str, Any]:
    bench = result.benchmark
    methods: dict[str, Any] = {}
    for method in result.methods:
        entry: dict[str, Any] = {
            "unavailable": method.unavailable,
            "errors": method.errors,
            "first_error": method.first_error,
            "median_ms": method.median_ms,
        }
        if method.unavailable is None:
            entry["overall"] = method.sheet.summary().to_dict()
            entry["by_type"] = {t: method.sheet.summary(t).to_dict() for t in method.sheet.types()}
        methods[method.name] = entry
    store = result.store
    found = result.inject
    return {
        "file": result.source,
        "name": bench.name,
        "setting": bench.setting,
        "memories": len(bench.memories),
        "queries": len(bench.queries),
        "scored_queries": sum(1 for q in bench.queries if q.answerable),
        "ks": list(result.ks),
        "keys": result.key_mode,
        "bm25_tokens": result.tokenization,
        "methods": methods,
        "not_found": {
            "queries": found.queries,
            "silent": found.silent,
            "errors": found.errors,
            "rate": found.rate,
            "unavailable": found.unavailable,
        },
        "inject_gold_shown": {
            kind: dict(zip(("shown", "queries"), found.gold_shown(kind), strict=True))
            for kind in sorted(found.answered)
        },
        "load": None
        if store is None
        else {
            "written": store.written,
            "keyless": store.keyless,
            "truncated": store.truncated,
            "merged": store.merged,
            "seconds": round(store.seconds, 3),
        },
        "wall_s": round(result.wall_s, 3),
    }
