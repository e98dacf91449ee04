"""Numerical faults: a rank that is fast and wrong, told by its training-health signals (issue 51).

Three rules over the newest `numeric.window_steps` complete steps of the run, each a `numeric_fault` finding:

* **grad norm** (subject `host/rankN`): per step, the robust z of log(local grad norm) of each rank among the ranks
  that should agree (same pp and tp coordinates: data-parallel replicas see batches of one distribution, so their
  local norms differ by sampling noise only). A rank out by `z` MADs (the MAD floored at `min_mad`) in `hits` steps
  of the window is named, with its host, its first step out and the evidence. Groups under `min_ranks` are not judged.
* **non-finite** (subject `nonfinite`): the first step of the run at which any rank reported non-finite values, and
  the ranks that did at that step. Gradients are counted before the all-reduce, so the culprit is alone at its step;
  the next steps every rank sees its NaN. The first step is kept in the walk's state (`ctx.state`) while the run lasts.
* **loss spike** (subject `loss`): a step whose job loss (the ranks' median) rises over the 5 steps before it by
  `loss_z` MADs of the rises in the job's own history (the `loss_history_steps` before it; a falling loss is no
  spread) and by `loss_rise_pct` of its level: fires while the spike is in the window, and says
  whether the loss has come back since.

Budget: 0.05 false alerts per healthy job-hour at 512 hosts x 8 GPUs (analyzer/README.md): a Gaussian z of 6 is
out ~2e-9 of the time, so even with tails 100x heavier two hits within 20 steps of one rank stay far below it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from vigil.analyzer.detect.base import AT, EvalContext, Finding, last_complete_step, median
from vigil.analyzer.detect.numrules import first_nonfinite, grad_outliers, loss_spikes, nonfinite_finding

# aggregates are named apart from the columns (r_...): ClickHouse would read an alias `ts` in the WHERE as max(ts)
_RANKS_SQL = f"""
SELECT step, rank, any(host) AS r_host, any(pp) AS r_pp, any(tp) AS r_tp, any(grad_norm) AS r_grad_norm,
       any(loss) AS r_loss, any(nonfinite) AS r_nonfinite, max(ts) AS r_ts
FROM step_timings
WHERE job_id = {{job:String}} AND step >= {{lo:UInt64}} AND step <= {{hi:UInt64}} AND ts <= {AT}
  AND ts >= {{start:DateTime64(3, 'UTC')}}
  AND (grad_norm IS NOT NULL OR loss IS NOT NULL OR nonfinite IS NOT NULL)
GROUP BY step, rank ORDER BY step, rank
"""
_LOSS_SQL = f"""
SELECT step, quantileExact(0.5)(loss) AS job_loss, max(ts) AS last_ts
FROM step_timings
WHERE job_id = {{job:String}} AND step >= {{lo:UInt64}} AND step <= {{hi:UInt64}} AND ts <= {AT}
  AND ts >= {{start:DateTime64(3, 'UTC')}} AND loss IS NOT NULL
GROUP BY step ORDER BY step
"""


class NumericDetector:
    name = "numeric_fault"
    false_alarms_per_hour = 0.05  # rank-level, but two hits of z >= 6 in 20 steps: see the module docstring
    cadence_s = 10.0  # judged every 10 s of event time over the newest `window_steps` steps

    def detect(self, ctx: EvalContext) -> list[Finding]:
        s = ctx.settings.numeric
        last = last_complete_step(ctx)
        if last is None or ctx.epoch is None or not ctx.stored("step"):
            return []
        lo = max(ctx.epoch.first_step, last - s.window_steps + 1)
        run = {"start": ctx.run_start(), "hi": last}
        rows = [{k.removeprefix("r_"): v for k, v in r.items()} for r in ctx.rows(_RANKS_SQL, lo=lo, **run)]
        if not rows:
            return []
        found = grad_outliers(rows, s)
        found += self._nonfinite(ctx, rows)
        history = ctx.rows(_LOSS_SQL, lo=max(ctx.epoch.first_step, lo - s.loss_history_steps), **run)
        losses = {int(r["step"]): float(r["job_loss"]) for r in history}
        times = {int(r["step"]): r["last_ts"] for r in history}
        found += loss_spikes(losses, [t for t in sorted(losses) if t >= lo], s, times)
        return found

    @staticmethod
    def _nonfinite(ctx: EvalContext, rows: list[dict[str, Any]]) -> list[Finding]:
        """The run's first non-finite step, kept in the walk's state while the window still shows non-finite values."""
        assert ctx.epoch is not None
        now = first_nonfinite(rows)
        if now is None:
            return []
        kept = ctx.state.get("numeric_nonfinite")
        if kept is None or kept[0] != ctx.epoch.index or kept[1] > now[0]:
            kept = (ctx.epoch.index, *now)
            ctx.state["numeric_nonfinite"] = kept
        _epoch, step, ranks, ts = kept
        per_step: dict[int, set[int]] = defaultdict(set)
        for r in rows:
            per_step[int(r["step"])].add(int(r["rank"]))
        world = int(median([len(v) for v in per_step.values()]))
        return [nonfinite_finding(step, ranks, ts, world)]
