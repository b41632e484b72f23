"""``keymem bench <service>``: load-test one service through the router (and directly)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from keymem.protocol.client import Client
from keymem.protocol.errors import KeymemError
from keymem.services.config import ALL_PROGRAMS, Settings
from keymem.services.loadtest import LoadResult, run_load

ROW = (
    "{path:<7} {clients:>7} {requests:>9} {throughput:>10} "
    "{p50:>8} {p99:>8} {p999:>8} {max:>8} {errors:>6}"
)


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("bench", help="load-test one service through the router")
    parser.add_argument("service", choices=ALL_PROGRAMS)
    parser.add_argument("--clients", type=int, default=1, help="concurrent client processes")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured duration per run")
    parser.add_argument("--method", default="ping")
    parser.add_argument("--body", default="null", help="request body as JSON")
    parser.add_argument(
        "--direct",
        action="store_true",
        help="also measure straight against one worker, bypassing the router, and print the ratio",
    )
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(run=run)


def direct_endpoint(settings: Settings, service: str) -> str:
    with Client(settings.endpoints.frontend, timeout_ms=2_000) as client:
        stats = client.call("router", "stats")
    for worker in stats["services"].get(service, {}).get("workers", []):
        if worker.get("direct"):
            return str(worker["direct"])
    raise KeymemError(f"no {service} worker advertises a direct endpoint")


def _row(result: LoadResult) -> str:
    return ROW.format(
        path=result.path,
        clients=result.clients,
        requests=result.requests,
        throughput=f"{result.throughput_per_s:.0f}/s",
        p50=f"{result.p50_ms:.3f}",
        p99=f"{result.p99_ms:.3f}",
        p999=f"{result.p999_ms:.3f}",
        max=f"{result.max_ms:.3f}",
        errors=result.errors,
    )


def run(args: argparse.Namespace) -> int:
    if args.clients < 1 or args.seconds <= 0:
        print("keymem bench: --clients must be >= 1 and --seconds > 0", file=sys.stderr)
        return 2
    try:
        body = json.loads(args.body)
    except json.JSONDecodeError as exc:
        print(f"keymem bench: --body is not JSON: {exc}", file=sys.stderr)
        return 2
    settings = Settings.from_env()
    if args.service == "router" and args.direct:
        print("keymem bench: the router has no direct path to compare with", file=sys.stderr)
        return 2
    try:
        targets = [("router", settings.endpoints.frontend)]
        if args.direct:
            targets.append(("direct", direct_endpoint(settings, args.service)))
    except KeymemError as exc:
        print(
            f"keymem bench: cannot reach keymem ({exc}); is `keymem up` running?", file=sys.stderr
        )
        return 1
    results = [
        run_load(
            endpoint,
            args.service,
            args.method,
            body,
            clients=args.clients,
            seconds=args.seconds,
            path=path,
        )
        for path, endpoint in targets
    ]
    ratio = None
    if len(results) == 2 and results[1].p50_ms > 0:
        ratio = round(results[0].p50_ms / results[1].p50_ms, 2)
    if args.json:
        print(
            json.dumps(
                {"results": [r.to_dict() for r in results], "router_over_direct_p50": ratio},
                indent=2,
            )
        )
        return 0
    print(
        f"{args.service}.{args.method}: {args.clients} client(s), {args.seconds:g} s each; "
        "latency in ms"
    )
    print(
        ROW.format(
            path="path",
            clients="clients",
            requests="requests",
            throughput="throughput",
            p50="p50",
            p99="p99",
            p999="p99.9",
            max="max",
            errors="errors",
        )
    )
    for result in results:
        print(_row(result))
    if ratio is not None:
        print(f"router p50 / direct p50 = {ratio:.2f}x")
    return 0 if all(r.requests for r in results) else 1
