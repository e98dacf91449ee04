"""A step window of one job, every rank: what the Chrome/Perfetto trace export draws.

Reads `step_timings` by its key prefix (job_id, step), so the cost is the window's rows,
not the job's; at most `limit` rows (a 1024-rank job's 200 steps fit).
"""

from __future__ import annotations

from dataclasses import dataclass

from vigil.dashboard.store import Store
from vigil.dashboard.tables import JOB_STEPS, STEP_TIMINGS

MAX_ROWS = 250_000

_SQL = f"""
SELECT rank, host, dp, tp, pp, step, toUnixTimestamp64Micro(ts) AS end_us, step_ms, phases, failed
FROM {STEP_TIMINGS}
WHERE job_id = {{job:String}} AND step >= {{first:UInt64}} AND step <= {{last:UInt64}}
ORDER BY rank, step
LIMIT 1 BY rank, step
LIMIT {{limit:UInt32}}
"""

_LAST_STEP_SQL = f"SELECT max(step) AS step FROM {JOB_STEPS} WHERE job_id = {{job:String}}"


@dataclass(frozen=True, kw_only=True)
class RankStep:
    rank: int
    host: str
    dp: int
    tp: int
    pp: int
    step: int
    end_us: int
    step_ms: float
    phases: dict[str, float]
    failed: bool


def last_step(store: Store, job: str) -> int | None:
    row = store.one("the job's last step", _LAST_STEP_SQL, {"job": job})
    return int(row["step"]) if row and row["step"] is not None else None


def step_window(store: Store, job: str, first: int, last: int, limit: int = MAX_ROWS) -> list[RankStep]:
    """Every rank's record of steps `first`..`last` (inclusive)."""
    rows = store.rows("the step window", _SQL, {"job": job, "first": max(0, first), "last": max(0, last),
                                                 "limit": limit})
    return [RankStep(rank=int(r["rank"]), host=str(r["host"]), dp=int(r["dp"]), tp=int(r["tp"]), pp=int(r["pp"]),
                     step=int(r["step"]), end_us=int(r["end_us"]), step_ms=float(r["step_ms"]),
                     phases={str(k): float(v) for k, v in dict(r["phases"]).items()}, failed=bool(r["failed"]))
            for r in rows]
