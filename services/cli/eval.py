"""``keymem eval FILE``: recall quality on a benchmark file, next to flat baselines.

Thin on purpose: parsing arguments and choosing the output; the work is in
``services.evaluation`` (one module per concern).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from keymem.services.evaluation.dataset import DatasetError, load_benchmark
from keymem.services.evaluation.loader import KEY_MODES, LoadError, default_key_mode
from keymem.services.evaluation.progress import Progress
from keymem.services.evaluation.report import render_text, to_json
from keymem.services.evaluation.runner import (
    METHODS,
    EvalOptions,
    evaluate,
    parse_ks,
    parse_methods,
)
from keymem.services.evaluation.tokens import KEYMEM, TOKENIZATIONS
from keymem.services.supervision import SupervisionError

DEFAULT_KS = "2,5,10"


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="recall quality on a benchmark file, with bm25/dense/hybrid baselines",
        description="Load a benchmark file (format: docs/EVAL.md) into a temporary keymem, run "
        "every query through hybrid recall and print recall@k, all@k, hit@k and MRR next to "
        "bm25, dense and hybrid baselines computed in the same run.",
    )
    parser.add_argument("file", type=Path, help="benchmark JSON file")
    parser.add_argument("--k", default=DEFAULT_KS, help=f"cut-offs (default {DEFAULT_KS})")
    parser.add_argument(
        "--keys",
        choices=KEY_MODES,
        default=None,
        help="keys written with each memory: the file's own (provided), the title, or none "
        "(auto-keys); default: the richest the file has",
    )
    parser.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"comma list of {', '.join(METHODS)} (without keymem no services are started)",
    )
    parser.add_argument(
        "--bm25-tokens",
        choices=TOKENIZATIONS,
        default=KEYMEM,
        help="bm25 baseline tokens: keymem's lexicon tokenizer (default) or BASELINES.md's raw "
        "Kiwi definition",
    )
    parser.add_argument("--limit", type=int, default=None, help="only the first N queries")
    parser.add_argument("--json", action="store_true", help="print everything as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        ks = parse_ks(args.k)
        methods = parse_methods(args.methods)
        if args.limit is not None and args.limit < 1:
            raise ValueError("--limit must be >= 1")
    except ValueError as exc:
        print(f"keymem eval: {exc}", file=sys.stderr)
        return 2
    progress = Progress(None if args.quiet else sys.stderr)
    try:
        benchmark = load_benchmark(args.file)
        if args.limit is not None:
            benchmark = benchmark.limited(args.limit)
        options = EvalOptions(
            ks=ks,
            key_mode=args.keys or default_key_mode(benchmark),
            methods=methods,
            tokenization=args.bm25_tokens,
        )
        result = evaluate(benchmark, str(args.file), options, progress)
    except DatasetError as exc:
        print(f"keymem eval: bad benchmark file: {exc}", file=sys.stderr)
        return 2
    except LoadError as exc:
        print(f"keymem eval: {exc}", file=sys.stderr)
        return 1
    except SupervisionError as exc:
        print(f"keymem eval: could not start keymem's services: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(to_json(result), indent=2, ensure_ascii=False))
    else:
        print(render_text(result))
    return 0
