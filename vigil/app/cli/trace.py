"""`vigil trace --job J [--steps A:B] -o FILE`: a step window as a Chrome/Perfetto trace.

Every rank is a track (grouped by data-parallel replica, sorted by pipeline stage and tensor
rank), its steps and phases spans on it: open the file in ui.perfetto.dev (or
chrome://tracing) to see pipeline bubbles and ranks waiting for a slow one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from vigil.settings import VigilSettings

DEFAULT_STEPS = 20


def register(sub: Any) -> None:
    p = sub.add_parser("trace", help="export a step window of a job as a Chrome/Perfetto trace (one track per rank)")
    p.add_argument("--job", required=True, help="job id")
    p.add_argument("--steps", type=parse_steps, default=None, metavar="A:B",
                   help=f"steps A to B, both included (default: the job's last {DEFAULT_STEPS})")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="FILE", help="where to write the JSON")
    p.set_defaults(handler=cmd_trace)


def parse_steps(text: str) -> tuple[int, int]:
    """`A:B` with 0 <= A <= B; ArgumentTypeError otherwise."""
    first, sep, last = text.partition(":")
    if not sep or not first.strip().isdigit() or not last.strip().isdigit() or int(first) > int(last):
        raise argparse.ArgumentTypeError(f"not a step range: {text!r} (expected A:B with A <= B, e.g. 100:120)")
    return int(first), int(last)


def export(client: Any, job: str, steps: tuple[int, int] | None, output: Path) -> dict[str, Any]:
    """Write the trace of `job`'s steps (default: its last ones) to `output`; the trace's summary."""
    from vigil.dashboard.queries import timeline
    from vigil.dashboard.store import Store
    from vigil.dashboard.trace import chrome_trace

    store = Store(client=client)
    if steps is None:
        last = timeline.last_step(store, job)
        if last is None:
            raise ValueError(f"no steps stored for job {job!r}")
        steps = (max(0, last - DEFAULT_STEPS + 1), last)
    rows = timeline.step_window(store, job, *steps)
    if not rows:
        raise ValueError(f"job {job!r} has no steps {steps[0]}..{steps[1]}")
    doc = chrome_trace(rows, job=job)
    output.write_text(json.dumps(doc))
    return {"steps": steps, "ranks": doc["otherData"]["ranks"], "events": len(doc["traceEvents"])}


def cmd_trace(args: argparse.Namespace) -> int:
    from vigil.app.stack.access import clickhouse_for_cli

    got = export(clickhouse_for_cli(VigilSettings.load()), args.job, args.steps, args.output)
    print(f"{args.output}: steps {got['steps'][0]}-{got['steps'][1]} of {args.job}, {got['ranks']} ranks, "
          f"{got['events']} events; open it in https://ui.perfetto.dev", file=sys.stderr)
    return 0
