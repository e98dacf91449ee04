"""3D-parallel view: each rank's recent phase (or step) time laid out by its (dp, pp, tp) coordinates.

Reads only the last `steps` steps of `step_timings` (the primary key starts with
(job_id, step), so this is a narrow range read) and aggregates per rank in ClickHouse.
"""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.store import Store

_SQL = """
SELECT *, quantileExact(0.5)(mean_ms) OVER () AS median_ms FROM (
WITH (SELECT max(step) FROM step_timings WHERE job_id = {job:String}) AS newest_step
SELECT rank, any(host) AS host, any(dp) AS dp, any(tp) AS tp, any(pp) AS pp,
       avg(if({phase:String} = '', step_ms, phases[{phase:String}])) AS mean_ms, count() AS samples,
       min(step) AS first_step, max(step) AS last_step
FROM step_timings
WHERE job_id = {job:String} AND step + {steps:UInt64} > newest_step
      AND ({phase:String} = '' OR mapContains(phases, {phase:String}))
GROUP BY rank) ORDER BY rank
"""


_HOST_AT_SQL = """
SELECT host FROM (
    SELECT host, 0 AS pref FROM job_ranks FINAL
    WHERE job_id = {job:String} AND dp = {dp:UInt32} AND pp = {pp:UInt32} AND tp = {tp:UInt32}
    UNION ALL
    SELECT host, 1 AS pref FROM step_timings
    WHERE job_id = {job:String} AND dp = {dp:UInt32} AND pp = {pp:UInt32} AND tp = {tp:UInt32}
      AND step = (SELECT max(step) FROM step_timings WHERE job_id = {job:String}))
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
    median_ms: float  # over all ranks

    @property
    def dev(self) -> float:
        return (self.mean_ms - self.median_ms) / self.median_ms if self.median_ms > 0 else 0.0


@dataclass(frozen=True, kw_only=True)
class ParallelView:
    phase: str  # '' = whole step
    first_step: int
    last_step: int
    ranks: list[RankCell]


def parallel_view(store: Store, job: str, *, phase: str | None, steps: int = 50) -> ParallelView:
    rows = store.rows("per-rank times", _SQL, {"job": job, "phase": phase or "", "steps": steps})
    cells = [RankCell(rank=int(r["rank"]), host=str(r["host"]), dp=int(r["dp"]), tp=int(r["tp"]), pp=int(r["pp"]),
                      mean_ms=float(r["mean_ms"]), median_ms=float(r["median_ms"])) for r in rows]
    return ParallelView(phase=phase or "", first_step=min((int(r["first_step"]) for r in rows), default=0),
                        last_step=max((int(r["last_step"]) for r in rows), default=0), ranks=cells)


def host_at(store: Store, job: str, *, dp: int, pp: int, tp: int) -> str | None:
    """The host of the rank at (dp, pp, tp) in `job` (from the job's rank table, else its step timings)."""
    row = store.one("the rank's host", _HOST_AT_SQL, {"job": job, "dp": dp, "pp": pp, "tp": tp})
    return str(row["host"]) if row and row["host"] else None
