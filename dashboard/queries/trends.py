"""Per-job trends for the Overview's job table: step time and MFU over the time range, every job at once.

Each job's range is anchored at its own latest event (`job_clock`), as every page's
window is, and cut into `points` equal buckets; one query averages the steps
(`job_steps`, one row per step) of each bucket. Buckets without a step stay empty,
so a stall shows as a gap.
"""

from __future__ import annotations

from dataclasses import dataclass

from vigil.dashboard.queries.overview import PER_STEP
from vigil.dashboard.store import Store
from vigil.dashboard.tables import JOB_CLOCK

_TRENDS_SQL = f"""
WITH steps AS ({PER_STEP.format(where="")}),
bounds AS (
    SELECT job_id, toUnixTimestamp64Milli(max(last_ts)) AS t1_ms,
           if({{range_s:UInt32}} = 0, toUnixTimestamp64Milli(min(first_ts)),
              greatest(toUnixTimestamp64Milli(min(first_ts)), t1_ms - 1000 * {{range_s:UInt32}})) AS t0_ms,
           intDiv(t1_ms - t0_ms, {{points:UInt32}}) + 1 AS width_ms
    FROM {JOB_CLOCK} GROUP BY job_id)
SELECT job_id, groupArray((b, step_ms, mfu)) AS buckets
FROM (
    SELECT s.job_id AS job_id,
           least({{points:UInt32}} - 1, intDiv(toUnixTimestamp64Milli(s.s_last_ts) - w.t0_ms, w.width_ms)) AS b,
           avg(s.step_ms) AS step_ms, avg(s.mfu) AS mfu
    FROM steps AS s INNER JOIN bounds AS w ON w.job_id = s.job_id
    WHERE toUnixTimestamp64Milli(s.s_last_ts) >= w.t0_ms
    GROUP BY job_id, b)
GROUP BY job_id
"""


@dataclass(frozen=True, kw_only=True)
class JobTrend:
    job_id: str
    step_ms: list[float | None]  # `points` buckets, oldest first; None: no step in the bucket
    mfu: list[float | None]


def job_trends(store: Store, range_s: int | None, points: int = 24) -> dict[str, JobTrend]:
    """Every job's step time and MFU in `points` buckets over the last `range_s` of it (None: all of it)."""
    out: dict[str, JobTrend] = {}
    for r in store.rows("step time and MFU per job", _TRENDS_SQL, {"range_s": range_s or 0, "points": points}):
        step_ms: list[float | None] = [None] * points
        mfu: list[float | None] = [None] * points
        for b, ms, m in r["buckets"]:
            step_ms[int(b)] = float(ms)
            mfu[int(b)] = None if m is None else float(m)
        out[str(r["job_id"])] = JobTrend(job_id=str(r["job_id"]), step_ms=step_ms, mfu=mfu)
    return out
