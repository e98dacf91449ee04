"""`vigil goodput --job J`: the job's goodput ledger (vigil.contract.ledger) over rolling windows, from ClickHouse.

Per window (5 min, 1 h, 1 day, the whole job: each ending at the job's latest event) the wall clock split into
productive steps at the ideal step time, slowdown, checkpoint saves, steps redone, each recovery phase and idle,
with the ETTR they imply (the same figure the dashboard and `vigil recovery history` show for the whole job).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from vigil.contract.ledger import CATEGORIES, Ledger
from vigil.settings import VigilSettings

WINDOWS: dict[str, float | None] = {"5m": 300.0, "1h": 3600.0, "1d": 86400.0, "all": None}


def register(sub: Any) -> None:
    p = sub.add_parser("goodput", help="where a job's wall clock went: the goodput ledger per rolling window")
    p.add_argument("--job", required=True, help="the job")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_goodput)


def cmd_goodput(args: argparse.Namespace) -> int:
    from vigil.app.stack.access import clickhouse_for_cli
    from vigil.dashboard.queries.ledger import job_ledger
    from vigil.dashboard.store import Store

    store = Store(client=clickhouse_for_cli(VigilSettings.load()))
    ledgers = {w: job_ledger(store, args.job, s) for w, s in WINDOWS.items()}
    if all(led is None for led in ledgers.values()):
        print(f"{args.job}: no completed step yet")
        return 1
    if args.json:
        print(json.dumps({w: None if led is None else {"wall_s": led.wall_s, "ettr": led.ettr, "over_s": led.over_s,
                                                        "balanced": led.balanced(), "seconds": led.seconds,
                                                        "slowdown_by": led.slowdown_by}
                          for w, led in ledgers.items()}, indent=2))
        return 0
    print(format_ledgers(args.job, ledgers))
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
