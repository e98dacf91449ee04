"""`vigil advise --job J [--nodes MIN:MAX] [--json]`: the resource advisor's recommendation for a job.

Reads the job's stored history (ClickHouse, through `vigil up`'s proxy when the embedded engine
is in use), prints the node count to run at, hot or starved hosts and the data loader's cost,
each with its reason.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from vigil.settings import VigilSettings


def register(sub: Any) -> None:
    p = sub.add_parser("advise", help="recommend a job's node count, flag hot/starved hosts, cost the data loader")
    p.add_argument("--job", required=True, help="job id")
    p.add_argument("--nodes", type=parse_range, default=None, metavar="MIN:MAX",
                   help="the job's node range: only counts within it are recommended")
    p.add_argument("--json", action="store_true", help="the recommendation as JSON")
    p.set_defaults(handler=cmd_advise)


def parse_range(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition(":")
    if not sep or not lo.strip().isdigit() or not hi.strip().isdigit() or not 0 < int(lo) <= int(hi):
        raise argparse.ArgumentTypeError(f"not a node range: {text!r} (expected MIN:MAX, 0 < MIN <= MAX)")
    return int(lo), int(hi)


def as_json(rec: Any) -> dict[str, Any]:
    return {"job_id": rec.job_id, "nodes": rec.nodes, "predicted": rec.predicted, "current": rec.current,
            "still_scaling": rec.still_scaling, "hot": list(rec.hot), "starved": list(rec.starved),
            "data_share": rec.data_share, "reasons": list(rec.reasons),
            "curve": [{"nodes": p.nodes, "throughput": p.throughput, "steps": p.steps, "efficiency": p.efficiency}
                      for p in rec.curve]}


def format_recommendation(rec: Any) -> str:
    if rec.nodes is None:
        head = f"{rec.job_id}: no recommendation yet"
    else:
        head = (f"{rec.job_id}: run on {rec.nodes} nodes (now {rec.current}); predicted throughput "
                f"{rec.predicted:,.0f}/s")
    return "\n".join([head, *(f"  {r}" for r in rec.reasons)])


def cmd_advise(args: argparse.Namespace) -> int:
    from vigil.analyzer.advisor.query import recommend
    from vigil.app.stack.access import clickhouse_for_cli

    rec = recommend(clickhouse_for_cli(VigilSettings.load()), args.job, nodes_range=args.nodes)
    print(json.dumps(as_json(rec), indent=2) if args.json else format_recommendation(rec))
    return 0 if rec.nodes is not None else 1
