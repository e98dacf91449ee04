"""3D-parallel view: each rank's phase (or step) time over the time range, laid out by its (dp, pp, tp) coordinates.

The range's steps come from the `job_steps` rollup (steps whose time overlaps the window);
at most `steps` of them are read from `step_timings`, evenly spaced and ending at the
range's last step. Its primary key starts with (job_id, step), so the read stays narrow
and its cost does not grow with the range; the per-rank means are aggregated in ClickHouse.

A waiting phase (communication, bubble) is longer on the ranks that wait for a slow peer
and shorter on the slow one, so there (`waiting=True`) the deviation is turned round, as
on the heatmap: (upper median - rank mean) / upper median. The slow rank reads +x% (it
made the others wait x% longer) and the ranks that waited 0%.
"""

from __future__ import annotations

from dataclasses import dataclass

from vigil.dashboard.queries.window import Window
from vigil.dashboard.store import Store
from vigil.dashboard.tables import JOB_RANKS, JOB_STEPS, STEP_TIMINGS

_STEPS_IN_RANGE = (f"FROM {JOB_STEPS} WHERE job_id = {{job:String}} "
                   "AND last_ts >= fromUnixTimestamp64Milli({t0:Int64}, 'UTC') "
                   "AND first_ts <= fromUnixTimestamp64Milli({t1:Int64}, 'UTC')")

_SQL = f"""
SELECT *, quantileExactLow(0.5)(mean_ms) OVER () AS median_ms, quantileExactHigh(0.5)(mean_ms) OVER () AS high_ms FROM (
WITH (SELECT minOrNull(step) {_STEPS_IN_RANGE}) AS lo, (SELECT maxOrNull(step) {_STEPS_IN_RANGE}) AS hi,
     intDiv(hi - lo + {{steps:UInt64}}, {{steps:UInt64}}) AS every
SELECT rank, any(host) AS host, any(dp) AS dp, any(tp) AS tp, any(pp) AS pp,
       avg(if({{phase:String}} = '', step_ms, phases[{{phase:String}}])) AS mean_ms, count() AS samples,
       min(step) AS first_step, max(step) AS last_step, any(every) AS stride
FROM {STEP_TIMINGS}
WHERE job_id = {{job:String}} AND step >= lo AND step <= hi AND (hi - step) % every = 0
      AND ({{phase:String}} = '' OR mapContains(phases, {{phase:String}}))
GROUP BY rank) ORDER BY rank
"""


_HOST_AT_SQL = f"""
SELECT host FROM (
    SELECT host, 0 AS pref FROM {JOB_RANKS} FINAL
    WHERE job_id = {{job:String}} AND dp = {{dp:UInt32}} AND pp = {{pp:UInt32}} AND tp = {{tp:UInt32}}
    UNION ALL
    SELECT host, 1 AS pref FROM {STEP_TIMINGS}
    WHERE job_id = {{job:String}} AND dp = {{dp:UInt32}} AND pp = {{pp:UInt32}} AND tp = {{tp:UInt32}}
      AND step = (SELECT max(step) FROM {STEP_TIMINGS} WHERE job_id = {{job:String}}))
ORDER BY pref LIMIT 1
"""


@dataclass(frozen=True, kw_only=True)
class RankCell:
    rank: int
    host: str
    dp: int
    tp: int
    pp: int
    mean_ms: float
    median_ms: float  # lower median over all ranks (as the heatmap's: a 2-rank job's slow rank reads slower)
    waiting: bool = False  # a waiting phase: median_ms is the upper median and the deviation is turned round

    @property
    def dev(self) -> float:
        if self.median_ms <= 0:
            return 0.0
        return (self.median_ms - self.mean_ms if self.waiting else self.mean_ms - self.median_ms) / self.median_ms


@dataclass(frozen=True, kw_only=True)
class ParallelView:
    phase: str  # '' = whole step
    waiting: bool  # the phase is a waiting phase (its deviations attribute the waiting to who caused it)
    first_step: int
    last_step: int
    stride: int  # every `stride`-th step of the range was read (1: all of them)
    ranks: list[RankCell]


def parallel_view(store: Store, win: Window, *, phase: str | None, waiting: bool = False,
                  steps: int = 50) -> ParallelView:
    """Per-rank means over the range's steps (at most `steps` of them, evenly spaced, the last one included).

    `waiting`: `phase` is a waiting phase (comm / wait kind): deviations are turned round.
    """
    waiting = waiting and bool(phase)
    rows = store.rows("per-rank times", _SQL, win.params(phase=phase or "", steps=max(1, steps)))
    cells = [RankCell(rank=int(r["rank"]), host=str(r["host"]), dp=int(r["dp"]), tp=int(r["tp"]), pp=int(r["pp"]),
                      mean_ms=float(r["mean_ms"]), median_ms=float(r["high_ms" if waiting else "median_ms"]),
                      waiting=waiting) for r in rows]
    return ParallelView(phase=phase or "", waiting=waiting, first_step=min((int(r["first_step"]) for r in rows), default=0),
                        last_step=max((int(r["last_step"]) for r in rows), default=0),
                        stride=max((int(r["stride"]) for r in rows), default=1), ranks=cells)


def host_at(store: Store, job: str, *, dp: int, pp: int, tp: int) -> str | None:
    """The host of the rank at (dp, pp, tp) in `job` (from the job's rank table, else its step timings)."""
    row = store.one("the rank's host", _HOST_AT_SQL, {"job": job, "dp": dp, "pp": pp, "tp": tp})
    return str(row["host"]) if row and row["host"] else None
