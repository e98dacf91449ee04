"""The checkpoint interval a job's goodput ledger implies: availability-optimal from its measured failure rate.

Young/Daly: with a save that blocks training C seconds and a mean time between failures M, the interval
between saves that wastes the least time is T = sqrt(2 C M) (Young), refined by Daly to
T = sqrt(2 C M) (1 + sqrt(C / 2M) / 3 + C / 18M) - C when C < 2M, else M. The time wasted per second of
training at interval T, with a restore (the downtime of a failure, detect to the first step) of R seconds, is
about C / T (saving) + (T / 2 + R) / M (per failure: half an interval redone on average, and the restore); the
optimum does not depend on R, the waste does. Pure; every page and command reads `implied()`.

M is measured: the job's wall clock / its fault recoveries. With none yet, M is at least the wall clock, so the
interval it implies is a lower bound (`bound`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def young_daly_s(save_s: float, mtbf_s: float) -> float:
    """The availability-optimal checkpoint interval (s) for a save of `save_s` and a MTBF of `mtbf_s` (Daly)."""
    if save_s <= 0 or mtbf_s <= 0:
        raise ValueError("save cost and MTBF must be positive")
    if save_s >= 2 * mtbf_s:
        return mtbf_s
    r = save_s / (2 * mtbf_s)
    return math.sqrt(2 * save_s * mtbf_s) * (1 + math.sqrt(r) / 3 + r / 9) - save_s


def waste(interval_s: float, save_s: float, restore_s: float, mtbf_s: float) -> float:
    """The share of time lost to saves and failures at `interval_s` (first order; capped at 1)."""
    if interval_s <= 0 or mtbf_s <= 0:
        return 1.0
    return min(1.0, save_s / interval_s + (interval_s / 2 + restore_s) / mtbf_s)


@dataclass(frozen=True, kw_only=True)
class CheckpointInterval:
    save_s: float | None  # mean time a save blocked training
    restore_s: float | None  # mean downtime of a failure (detect to the first step after it)
    failures: int
    mtbf_s: float | None  # wall clock / failures (the wall clock itself, a lower bound, with no failure)
    current_s: float | None  # the job's own interval: the median time between its saves (a stall between two counts)
    optimal_s: float | None
    bound: bool  # no failure yet: the optimum is at least optimal_s
    waste_current: float | None
    waste_optimal: float | None


def implied(*, wall_s: float, failures: int, save_s: float | None, restore_s: float | None,
            current_s: float | None) -> CheckpointInterval:
    """The optimum beside the job's current interval, from its measured wall clock, failures and costs."""
    mtbf = wall_s / failures if failures > 0 else (wall_s if wall_s > 0 else None)
    opt = young_daly_s(save_s, mtbf) if save_s and mtbf else None
    rs = restore_s or 0.0
    def w(t: float | None) -> float | None:
        return None if t is None or not save_s or not mtbf else round(waste(t, save_s, rs, mtbf), 6)
    return CheckpointInterval(save_s=save_s, restore_s=restore_s, failures=failures, mtbf_s=mtbf,
                              current_s=current_s, optimal_s=opt, bound=failures == 0,
                              waste_current=w(current_s), waste_optimal=w(opt))


def describe(ci: CheckpointInterval) -> str:
    """One line: the optimum beside the current interval and what each wastes."""
    def secs(v: float | None) -> str:
        return "-" if v is None else f"{v:,.0f} s" if v >= 10 else f"{v:.1f} s"
    def pct(v: float | None) -> str:
        return "" if v is None else f" (waste {v:.1%})"
    if ci.optimal_s is None:
        return f"checkpoint interval: current {secs(ci.current_s)}; optimum unknown (no save measured)"
    ge = ">= " if ci.bound else ""
    return (f"checkpoint interval: current {secs(ci.current_s)}{pct(ci.waste_current)}, availability-optimal "
            f"{ge}{secs(ci.optimal_s)}{pct(None if ci.bound else ci.waste_optimal)} (Young/Daly: save "
            f"{secs(ci.save_s)}, MTBF {ge}{secs(ci.mtbf_s)} from {ci.failures} failures, restore {secs(ci.restore_s)})")
