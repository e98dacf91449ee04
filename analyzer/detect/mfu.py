"""MFU drift: the run's efficiency now against its own healthy baseline, attributed to phases.

Per step of the job's current run (`job_step_runs`, see epoch.py): MFU (mean over ranks)
when the timer reports it, else step time (MFU is inversely proportional to it for a
fixed model). Baseline = median over `mfu.baseline_steps` steps after the run's first
`mfu.warmup_steps` — relative to the step the run began at, so a job resumed at step
4800 has its baseline at 4820-4869 and is judged as soon as one started at 0; a restart
takes a fresh baseline. Current = median over the last `mfu.current_steps` complete
steps. It fires when the drop is >= `mfu.drop_pct`, or when a least-squares trend over
the last `mfu.trend_steps` (on 10-step medians) projects a decline >= `mfu.trend_pct`;
in both cases only when some phase's fleet-mean time grew by at least
`mfu.phase_growth_pct` — those phases are named. Only compute phases count: waiting
phases (grad_sync, bubble: vigil/contract/phases.py) grow fleet-wide whenever one rank is
slow, because everyone else waits for it. A drop that no compute phase explains
fleet-wide is one slow host: the straggler detector's business. The alert quotes the
real step numbers of its baseline and current windows, and the run they belong to.

A firing drift resolves once the drop is clearly back (and the trend under `mfu.trend_pct`):
at or below half `mfu.drop_pct` less `mfu.release_z` standard errors of the measured drop
(from the steps' own spread, robust: MAD of the baseline or current window, the larger), and
always at or below a quarter of `mfu.drop_pct`. A drift that hovers near its threshold with
noisy steps (a 20-step median moves by a few percent between judgements) stays one alert
instead of resolving and firing again; a recovery to the baseline, or a lasting drop too small
to matter, resolves it. A drift fired by its trend is held by the same rule once the trend
flattens: a decline that stopped at 2 % below the baseline stays firing when the steps are too
noisy to tell 2 % from 5 %.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from vigil.analyzer.detect.base import AT, RUN, EvalContext, Finding, as_utc, last_complete_step, median
from vigil.analyzer.detect.phases import job_phases
from vigil.analyzer.schema import ROLLUP_WINDOW_STEPS
from vigil.analyzer.settings import MfuSettings
from vigil.contract.phases import is_waiting

_STEPS_SQL = f"""
SELECT step, max(max_step_ms) AS step_ms, sum(sum_mfu) AS smfu, sum(n_mfu) AS nmfu, max(last_ts) AS last_ts,
       sumMap(phase_ms) AS phase_ms, sumMap(phase_n) AS phase_n
FROM job_step_runs
WHERE job_id = {{job:String}} AND {RUN} AND step <= {{last:UInt64}}
  AND ((step >= {{b_lo:UInt64}} AND step < {{b_hi:UInt64}}) OR step >= {{r_lo:UInt64}})
GROUP BY step HAVING last_ts <= {AT} ORDER BY step
"""


class MfuDriftDetector:
    name = "mfu_drift"
    false_alarms_per_hour = 0.1  # one job-level series
    cadence_s = 10.0  # a drift over tens of steps: judged every 10 s of event time, not every instant

    def detect(self, ctx: EvalContext) -> list[Finding]:
        s = ctx.settings.mfu
        last = last_complete_step(ctx)
        if last is None or ctx.epoch is None:
            return []
        b_lo = ctx.epoch.first_step + s.warmup_steps
        b_hi = b_lo + s.baseline_steps
        if last < b_hi + s.current_steps:
            return []
        r_lo = max(b_hi, last - max(s.trend_steps, s.current_steps) + 1)
        steps = ctx.rows(_STEPS_SQL, b_lo=b_lo, b_hi=b_hi, r_lo=r_lo, last=last, **ctx.run_buckets())
        phases = [{"phase": p, "step": r["step"], "mean_ms": ms / int(r["phase_n"][p])}
                  for r in steps if int(r["step"]) < b_hi or int(r["step"]) > last - s.current_steps
                  for p, ms in r["phase_ms"].items() if int(r["phase_n"].get(p, 0)) > 0]
        kinds = job_phases(ctx, b_lo // ROLLUP_WINDOW_STEPS, last // ROLLUP_WINDOW_STEPS).kinds
        phases = [r for r in phases if not is_waiting(kinds.get(str(r["phase"]), "compute"))]
        findings = judge(steps, phases, s, firing=ctx.is_firing("mfu_drift", "job"), baseline_from=b_lo)
        return [_with_run(f, ctx) for f in findings]


def _with_run(f: Finding, ctx: EvalContext) -> Finding:
    if ctx.epoch is None:
        return f
    return replace(f, evidence={**f.evidence, "run": ctx.epoch.describe()})


def _efficiency(rows: Sequence[Mapping[str, Any]]) -> tuple[dict[int, float], str]:
    """Per step: MFU if most steps carry it, else 1000/step_ms (steps per second)."""
    with_mfu = sum(1 for r in rows if int(r["nmfu"]) > 0)
    if rows and with_mfu * 2 >= len(rows):
        return {int(r["step"]): float(r["smfu"]) / int(r["nmfu"]) for r in rows if int(r["nmfu"]) > 0}, "mfu"
    return {int(r["step"]): 1000.0 / float(r["step_ms"]) for r in rows if float(r["step_ms"]) > 0}, "steps_per_s"


def _trend_pct(values: dict[int, float], base: float, span: int) -> float:
    """Projected decline (%) over `span` steps of a least-squares line through 10-step medians."""
    chunks: dict[int, list[float]] = defaultdict(list)
    for step, v in values.items():
        chunks[step // 10].append(v)
    pts = [(c * 10 + 5.0, median(vs)) for c, vs in sorted(chunks.items()) if len(vs) >= 5]
    if len(pts) < 5:
        return 0.0
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    slope = sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else 0.0
    return -slope * span / base * 100


def judge(steps: Sequence[Mapping[str, Any]], phases: Sequence[Mapping[str, Any]], s: MfuSettings,
          firing: bool = False, baseline_from: int | None = None) -> list[Finding]:
    """Findings from per-step rows {step, step_ms, smfu, nmfu, last_ts} and phase rows {phase, step, mean_ms};
    the baseline is `mfu.baseline_steps` steps from `baseline_from` (the run's first step + warm-up)."""
    b_lo = s.warmup_steps if baseline_from is None else baseline_from
    b_hi = b_lo + s.baseline_steps
    eff, metric = _efficiency(steps)
    if not eff:
        return []
    last = max(eff)
    base_vals = [v for k, v in eff.items() if b_lo <= k < b_hi]
    cur_vals = [v for k, v in eff.items() if k > last - s.current_steps and k >= b_hi]
    if len(base_vals) < s.baseline_steps // 2 or len(cur_vals) < s.current_steps // 2:
        return []
    base, cur = median(base_vals), median(cur_vals)
    drop = (base - cur) / base * 100 if base > 0 else 0.0
    trend = _trend_pct({k: v for k, v in eff.items() if k > last - s.trend_steps and k >= b_hi},
                       base, s.trend_steps) if last - b_hi >= s.trend_steps else 0.0
    quiet = trend < s.trend_pct
    if quiet and (drop <= release_pct(base_vals, cur_vals, s) if firing else drop < s.drop_pct):
        return []
    grown = _grown_phases(phases, b_lo, b_hi, last - s.current_steps, s)
    if not grown:
        return []
    since = max((as_utc(r["last_ts"]) for r in steps if int(r["step"]) == last), default=None)
    assert since is not None
    named = ", ".join(f"{p} +{g:.1f}%" for p, g in grown.items())
    what = "MFU" if metric == "mfu" else "throughput"
    return [Finding(
        alert="mfu_drift", subject="job", host="*", severity="warning", since=since,
        summary=f"{what} {drop:.1f}% below its baseline (steps {b_lo}-{b_hi - 1}); slower phases: {named}",
        evidence={"metric": metric, "baseline": round(base, 5), "current": round(cur, 5),
                  "drop_pct": round(drop, 2), "trend_pct": round(trend, 2), "phases": list(grown),
                  "phase_growth_pct": {p: round(g, 2) for p, g in grown.items()},
                  "baseline_steps": [b_lo, b_hi - 1], "current_steps": [last - s.current_steps + 1, last]},
    )]


def release_pct(base_vals: Sequence[float], cur_vals: Sequence[float], s: MfuSettings) -> float:
    """The drop (%) at or below which a firing drift resolves: half `drop_pct` less `release_z` standard errors of
    the difference of the two windows' medians (normal-consistent MAD of the noisier window), and never below a
    quarter of `drop_pct` (a drift whose drop is that small resolves however noisy its steps)."""
    base, cur = median(base_vals), median(cur_vals)
    if base <= 0:
        return s.drop_pct / 2
    mad = max(median([abs(v - base) for v in base_vals]), median([abs(v - cur) for v in cur_vals]))
    se = 1.2533 * 1.4826 * mad / base * 100 * math.sqrt(1 / len(base_vals) + 1 / len(cur_vals))  # a median's SE
    return max(s.drop_pct / 4, s.drop_pct / 2 - s.release_z * se)


def _grown_phases(rows: Sequence[Mapping[str, Any]], b_lo: int, b_hi: int, c_lo: int,
                  s: MfuSettings) -> dict[str, float]:
    base: dict[str, list[float]] = defaultdict(list)
    cur: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        step, phase, ms = int(r["step"]), str(r["phase"]), float(r["mean_ms"])
        if b_lo <= step < b_hi:
            base[phase].append(ms)
        elif step > c_lo:
            cur[phase].append(ms)
    out = {}
    for phase in base.keys() & cur.keys():
        b, c = median(base[phase]), median(cur[phase])
        if b > 0 and (c - b) / b * 100 >= s.phase_growth_pct:
            out[phase] = (c - b) / b * 100
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))
