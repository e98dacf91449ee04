"""Overview: per job health figures (so far) and the step time / MFU series of one job.

Effective training time ratio: the one definition, vigil.contract.goodput (distinct steps
completed x ideal step time / wall clock to the job's latest event), which the Recovery page
and `vigil recovery history` read through `job_health` too.
"""

from __future__ import annotations

from dataclasses import dataclass

from vigil.contract.goodput import ettr_sql, per_job_sql
from vigil.contract.severity import WORST_FIRST
from vigil.dashboard.queries.window import Window, ts_in_window
from vigil.dashboard.store import Store
from vigil.dashboard.tables import ALERTS_CURRENT, HOST_PRESENCE, JOB_CLOCK, JOB_STEPS

# one row per (job, step): job_steps is an AggregatingMergeTree whose parts may not be merged yet
PER_STEP = f"""
SELECT job_id, step, sum(sum_step_ms) / greatest(sum(ranks), 1) AS step_ms, max(max_step_ms) AS max_step_ms,
       if(sum(n_mfu) > 0, sum(sum_mfu) / sum(n_mfu), NULL) AS mfu, sum(sum_tokens) AS tokens,
       sum(failed) AS failed, min(first_ts) AS s_first_ts, max(last_ts) AS s_last_ts
FROM {JOB_STEPS} {{where}} GROUP BY job_id, step
"""

_JOB = "/*job*/"
_HEALTH_SQL = f"""
WITH steps AS ({PER_STEP.format(where="")}),
per_job AS ({per_job_sql("steps", ", argMax(step_ms, step) AS last_step_ms, argMax(mfu, step) AS last_mfu")}),
clock AS (SELECT job_id, max(last_ts) AS last_ts FROM {JOB_CLOCK} GROUP BY job_id),
presence AS (
    SELECT p.job_id AS job_id, countIf(p.last_ts >= c.last_ts - toIntervalMillisecond(
               toUInt64(1000 * greatest(3 * p.interval_s, 10)))) AS reporting, count() AS known
    FROM (SELECT job_id, host, max(last_ts) AS last_ts, max(interval_s) AS interval_s
          FROM {HOST_PRESENCE} GROUP BY job_id, host) AS p
    INNER JOIN clock AS c ON c.job_id = p.job_id GROUP BY p.job_id),
firing AS (
    SELECT job_id, {", ".join(f"countIf(severity = '{s}') AS {s}" for s in WORST_FIRST)}
    FROM {ALERTS_CURRENT} WHERE status = 'firing' GROUP BY job_id)
SELECT c.job_id AS job_id, s.steps AS steps, s.last_step AS last_step, s.median_step_ms AS median_step_ms,
       s.ideal_step_ms AS ideal_step_ms, s.last_step_ms AS last_step_ms, s.last_mfu AS last_mfu,
       s.first_ms AS first_ms, greatest(toUnixTimestamp64Milli(c.last_ts), s.last_ms) AS end_ms,
       {ettr_sql("s.steps", "s.ideal_step_ms", "s.first_ms", "greatest(toUnixTimestamp64Milli(c.last_ts), s.last_ms)")}
           AS ettr,
       p.reporting AS reporting, p.known AS known,
       f.critical AS critical, f.error AS error, f.warning AS warning, f.info AS info
FROM clock AS c
LEFT JOIN per_job AS s ON s.job_id = c.job_id
LEFT JOIN presence AS p ON p.job_id = c.job_id
LEFT JOIN firing AS f ON f.job_id = c.job_id
{_JOB}
SETTINGS join_use_nulls = 1
"""

_SERIES_SQL = f"""
WITH steps AS ({PER_STEP.format(where="WHERE job_id = {job:String} AND " + ts_in_window("last_ts"))})
SELECT toUnixTimestamp64Milli(toDateTime64(toStartOfInterval(s_last_ts, toIntervalSecond({{bucket:UInt32}})), 3))
           AS t_ms,
       avg(step_ms) AS step_ms, max(max_step_ms) AS max_step_ms, avg(mfu) AS mfu,
       sum(tokens) / {{bucket:UInt32}} AS tokens_per_s, min(step) AS first_step, max(step) AS last_step
FROM steps GROUP BY t_ms ORDER BY t_ms
"""


@dataclass(frozen=True, kw_only=True)
class JobHealth:
    job_id: str
    steps: int
    last_step: int | None
    median_step_ms: float | None
    ideal_step_ms: float | None
    wall_s: float | None  # the ratio's wall clock
    first_ms: int | None  # its first step's record (epoch ms): the wall clock starts one ideal step before
    last_step_ms: float | None
    last_mfu: float | None
    ettr: float | None
    hosts_reporting: int
    hosts_known: int
    alerts: dict[str, int]  # firing alerts by severity


@dataclass(frozen=True, kw_only=True)
class StepSeries:
    bucket_s: int
    t_ms: list[int]
    step_ms: list[float]
    max_step_ms: list[float]
    mfu: list[float | None]
    tokens_per_s: list[float]


def _opt_float(v: object) -> float | None:
    return None if v is None else float(v)  # type: ignore[arg-type]


def job_health(store: Store, job: str | None = None) -> dict[str, JobHealth]:
    """Health figures of every job (or of `job` alone), by job id."""
    out: dict[str, JobHealth] = {}
    sql = _HEALTH_SQL if job is None else _HEALTH_SQL.replace(_JOB, "WHERE c.job_id = {job:String}")
    for r in store.rows("job health", sql, {} if job is None else {"job": job}):
        ideal = _opt_float(r["ideal_step_ms"])
        wall = None if ideal is None or r["end_ms"] is None else (int(r["end_ms"]) - int(r["first_ms"]) + ideal) / 1000
        out[str(r["job_id"])] = JobHealth(
            job_id=str(r["job_id"]), steps=int(r["steps"] or 0),
            last_step=None if r["last_step"] is None else int(r["last_step"]),
            median_step_ms=_opt_float(r["median_step_ms"]), ideal_step_ms=ideal, wall_s=wall,
            first_ms=None if r["first_ms"] is None else int(r["first_ms"]),
            last_step_ms=_opt_float(r["last_step_ms"]),
            last_mfu=_opt_float(r["last_mfu"]), ettr=_opt_float(r["ettr"]),
            hosts_reporting=int(r["reporting"] or 0), hosts_known=int(r["known"] or 0),
            alerts={s: int(r[s] or 0) for s in WORST_FIRST},
        )
    return out


def step_series(store: Store, win: Window, max_points: int) -> StepSeries:
    bucket = win.bucket_s(max_points)
    rows = store.rows("step time and MFU", _SERIES_SQL, win.params(bucket=bucket))
    return StepSeries(
        bucket_s=bucket, t_ms=[int(r["t_ms"]) for r in rows], step_ms=[float(r["step_ms"]) for r in rows],
        max_step_ms=[float(r["max_step_ms"]) for r in rows], mfu=[_opt_float(r["mfu"]) for r in rows],
        tokens_per_s=[float(r["tokens_per_s"] or 0) for r in rows],
    )
