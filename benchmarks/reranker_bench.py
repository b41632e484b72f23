"""Reranker figures for docs/BENCHMARKS.md: a 30-passage pool, cold and cached, by passage size.

    python -m benchmarks.reranker_bench [--seconds 5] [--json]

Starts a router and one reranker (offline default: USE-m cosine) as real processes, as
``benchmarks.embedder_bench`` does, and scores pools of ``POOL`` passages with one client:

- *cold*: the worker runs with ``KEYMEM_RERANK_CACHE=0`` and every pool is new text, so every
  passage is embedded (what the first recall over fresh memories pays);
- *cached*: the same pool again and again (what repeated recalls over a stable store pay).

Passages are HotpotQA paragraphs from ../shared/data when present (~550 characters each here),
and short agent-style memories (~80 characters) built here; the query is a question.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from benchmarks.embedder_bench import closed_loop, deployment
from keymem.protocol.client import Client

POOL = 30
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpot_per_query.dev.json"
# Agent-style memories of one or two sentences (~110 characters), English and Korean.
SHORT_TEMPLATES = (
    "The user prefers {a} over {b} for day-to-day work; they said so twice during the review.",
    "사용자는 {a}보다 {b}를 더 좋아한다고 말했다. 다음 회의 자료도 그 기준으로 준비해야 한다.",
    "Deadline for the {a} project moved to {b}; the release notes and the changelog must follow.",
    "{a} 서버의 비밀번호는 매달 {b}에 바뀐다. 바뀐 뒤에는 배포 스크립트의 설정도 갱신한다.",
    "Remember: {a} is allergic to {b}, so the team lunch order on Fridays must avoid it entirely.",
)
WORDS = ("Python", "Rust", "딸기", "coffee", "Friday", "회의", "Seoul", "peanuts", "Kiwi", "DuckDB")
QUERY = "Which memory says what the user prefers and when the deadline is?"


def _paragraphs() -> list[str]:
    if not DATA.is_file():
        return []
    return [str(m["content"]) for m in json.loads(DATA.read_text())["memories"]]


_CACHE: dict[str, list[str]] = {}


def corpus(size: str) -> list[str]:
    if size not in _CACHE:
        if size == "paragraph":
            _CACHE[size] = _paragraphs()
        else:
            _CACHE[size] = [
                t.format(a=WORDS[i % len(WORDS)], b=WORDS[(i // len(WORDS)) % len(WORDS)])
                + f" #{i}"
                for i, t in enumerate(SHORT_TEMPLATES * 600)
            ]
    return _CACHE[size]


def pool_body(spec: dict[str, Any], client_id: int, call: int) -> dict[str, Any]:
    texts = corpus(spec["size"])
    start = 0 if spec["cached"] else (call * POOL) % max(1, len(texts) - POOL)
    passages = texts[start : start + POOL]
    if not spec["cached"]:
        passages = [f"{p} ({client_id}.{call})" for p in passages]  # new text on every call
    return {"query": QUERY, "passages": passages}


def measure(seconds: float) -> dict[str, Any]:
    report: dict[str, Any] = {"load_avg_before": os.getloadavg()[0], "rows": []}
    sizes = ["short"] + (["paragraph"] if _paragraphs() else [])
    for cached in (False, True):
        extra = {} if cached else {"KEYMEM_RERANK_CACHE": "0"}
        with deployment({"reranker": extra}) as (dep, ready):
            if cached:
                report["spawn_to_ready_s"] = ready["reranker"]
                report["rss_mb"] = dep.rss_mb("reranker")
            for size in sizes:
                spec = {"kind": "rerank", "size": size, "cached": cached}
                if cached:  # the pool is warm before the clock starts, as after a write
                    with Client(dep.frontend) as client:
                        client.call(
                            "reranker", "warm", {"passages": pool_body(spec, 0, 0)["passages"]}
                        )
                row = closed_loop(
                    dep.frontend, "reranker", "score", spec, 1, seconds, dep.pids("reranker")
                )
                passages = corpus(size)[:POOL]
                row.update(
                    size=size,
                    cached=cached,
                    mean_chars=round(sum(map(len, passages)) / len(passages)),
                )
                report["rows"].append(row)
    report["load_avg_after"] = os.getloadavg()[0]
    return report


def render(report: dict[str, Any]) -> str:
    lines = [
        f"reranker spawn to ready {report['spawn_to_ready_s']:.2f} s, RSS {report['rss_mb']} MB; "
        f"load average {report['load_avg_before']:.2f} before, "
        f"{report['load_avg_after']:.2f} after",
        "",
        f"| {POOL} passages | mean chars | passage vectors | p50 ms | p99 ms | pools/s "
        "| reranker CPU ms/pool |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for row in report["rows"]:
        lines.append(
            f"| {row['size']} | {row['mean_chars']} | {'cached' if row['cached'] else 'cold'} | "
            f"{row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['requests_per_s']:.1f} | "
            f"{row['reranker_cpu_ms_per_request']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="reranker benchmark")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = measure(args.seconds)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
