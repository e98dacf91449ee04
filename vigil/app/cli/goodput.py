"""`vigil goodput --job J | --fleet`: the goodput ledger (vigil.contract.ledger) over rolling windows, from ClickHouse.

Per window (5 min, 1 h, 1 day, the whole job: each ending at the job's latest event) the wall clock split into
productive steps at the ideal step time, slowdown (charged to the hosts that caused it), data-loader wait,
checkpoint saves, steps redone, each recovery phase, elastic resizes, SDC checks and replays, and idle, with the
ETTR they imply (the same figure the dashboard and `vigil recovery history` show for the whole job), and the
checkpoint interval the ledger implies (vigil.contract.ckpt_interval) beside the job's own. `--fleet`: every
job's, in GPU-hours, the windows ending at the fleet's latest event.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from vigil.contract.ckpt_interval import describe
from vigil.contract.ledger import CATEGORIES, WINDOWS, FleetLedger, Ledger
from vigil.settings import VigilSettings


def register(sub: Any) -> None:
    p = sub.add_parser("goodput", help="where a job's (or the fleet's) wall clock went: the goodput ledger")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--job", help="the job")
    who.add_argument("--fleet", action="store_true", help="every job, in GPU-hours")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_goodput)


def cmd_goodput(args: argparse.Namespace) -> int:
    from vigil.app.stack.access import clickhouse_for_cli
    from vigil.dashboard.queries.ledger import checkpoint_interval, fleet_ledger, job_ledgers
    from vigil.dashboard.store import Store

    store = Store(client=clickhouse_for_cli(VigilSettings.load()))
    if args.fleet:
        fleets = {w: fleet_ledger(store, s) for w, s in WINDOWS.items()}
        if all(f is None for f in fleets.values()):
            print("fleet: no completed step yet")
            return 1
        print(json.dumps({w: None if f is None else {"wall_gpu_hours": f.wall_gpu_hours, "ettr": f.ettr,
                                                      "balanced": f.balanced(), "gpu_hours": f.gpu_hours,
                                                      "jobs": f.jobs} for w, f in fleets.items()}, indent=2)
              if args.json else format_fleet(fleets))
        return 0
    ledgers = job_ledgers(store, args.job, WINDOWS)
    if all(led is None for led in ledgers.values()):
        print(f"{args.job}: no completed step yet")
        return 1
    ci = checkpoint_interval(store, args.job)
    if args.json:
        print(json.dumps({**{w: None if led is None else {"wall_s": led.wall_s, "ettr": led.ettr, "over_s": led.over_s,
                                                           "balanced": led.balanced(), "seconds": led.seconds,
                                                           "slowdown_by": led.slowdown_by}
                             for w, led in ledgers.items()},
                          "checkpoint_interval": None if ci is None else vars(ci)}, indent=2))
        return 0
    print(format_ledgers(args.job, ledgers))
    if ci is not None:
        print(describe(ci))
    return 0


def format_ledgers(job: str, ledgers: dict[str, Ledger | None]) -> str:
    """The ledgers as a table: a column per window, a row per category (seconds and share of the wall clock)."""
    shown = [(w, led) for w, led in ledgers.items() if led is not None]
    lines = [f"{job}: seconds (share of the wall clock)", f"{'':<16}" + "".join(f"{w:>18}" for w, _ in shown)]
    for k in ("wall", *CATEGORIES):
        cells = [(led.wall_s, 1.0) if k == "wall" else (led.seconds[k], led.seconds[k] / led.wall_s)
                 for _, led in shown]
        lines.append(f"{k:<16}" + "".join(f"{v:>11.1f} {p:>5.1%}" for v, p in cells))
    lines.append(f"{'ETTR':<16}" + "".join(f"{led.ettr or 0:>18.1%}" for _, led in shown))
    lines += [f"{w}: slowdown charged to " + ", ".join(f"{h} {v:.1f} s" for h, v in list(led.slowdown_by.items())[:5])
              for w, led in shown if led.slowdown_by]
    lines += [f"{w}: the records claim {led.over_s:.1f} s beyond the wall clock (they overlap)"
              for w, led in shown if not led.balanced()]
    return "\n".join(lines)


def format_fleet(fleets: dict[str, FleetLedger | None]) -> str:
    """The fleet's ledgers: a column per window, a row per category (GPU-hours and share)."""
    shown = [(w, f) for w, f in fleets.items() if f is not None]
    lines = ["fleet: GPU-hours (share of the GPUs' wall clock)",
             f"{'':<16}" + "".join(f"{w:>18}" for w, _ in shown)]
    for k in ("wall", *CATEGORIES):
        cells = [(f.wall_gpu_hours, 1.0) if k == "wall" else (f.gpu_hours[k], f.gpu_hours[k] / f.wall_gpu_hours)
                 for _, f in shown]
        lines.append(f"{k:<16}" + "".join(f"{v:>11.2f} {p:>5.1%}" for v, p in cells))
    lines.append(f"{'ETTR':<16}" + "".join(f"{f.ettr or 0:>18.1%}" for _, f in shown))
    lines.append(f"{'jobs':<16}" + "".join(f"{len(f.jobs):>18}" for _, f in shown))
    return "\n".join(lines)
