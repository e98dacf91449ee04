"""Which jobs exist, their shape, and their event-time span (for the job picker and windows)."""

from __future__ import annotations

from dataclasses import dataclass

from vigil.dashboard.queries.window import Window, window_for
from vigil.dashboard.store import Store
from vigil.dashboard.tables import JOB_CLOCK, JOBS

_JOBS_SQL = f"""
SELECT c.job_id AS job_id, toUnixTimestamp64Milli(c.first_ts) AS first_ms,
       toUnixTimestamp64Milli(c.last_ts) AS last_ms, toUnixTimestamp64Milli(c.ingested) AS ingested_ms,
       j.name AS name, j.world_size AS world_size, j.tp AS tp, j.pp AS pp, j.dp AS dp,
       j.gpus_per_host AS gpus_per_host, j.gpu_model AS gpu_model, j.n_hosts AS n_hosts
FROM (SELECT job_id, min(first_ts) AS first_ts, max(last_ts) AS last_ts, max(last_ingested) AS ingested
      FROM {JOB_CLOCK} GROUP BY job_id) AS c
LEFT JOIN (SELECT job_id, argMax(name, ts) AS name, argMax(world_size, ts) AS world_size, argMax(tp, ts) AS tp,
                  argMax(pp, ts) AS pp, argMax(dp, ts) AS dp, argMax(gpus_per_host, ts) AS gpus_per_host,
                  argMax(gpu_model, ts) AS gpu_model, length(argMax(hosts, ts)) AS n_hosts
           FROM {JOBS} GROUP BY job_id) AS j ON j.job_id = c.job_id
ORDER BY last_ms DESC, job_id
"""


@dataclass(frozen=True, kw_only=True)
class JobInfo:
    job_id: str
    name: str
    first_ms: int
    last_ms: int
    ingested_ms: int
    world_size: int
    tp: int
    pp: int
    dp: int
    gpus_per_host: int
    gpu_model: str
    n_hosts: int


def list_jobs(store: Store) -> list[JobInfo]:
    """Every job with telemetry, most recently active first."""
    return [JobInfo(
        job_id=str(r["job_id"]), name=str(r["name"] or ""), first_ms=int(r["first_ms"]), last_ms=int(r["last_ms"]),
        ingested_ms=int(r["ingested_ms"]), world_size=int(r["world_size"] or 0), tp=int(r["tp"] or 0),
        pp=int(r["pp"] or 0), dp=int(r["dp"] or 0), gpus_per_host=int(r["gpus_per_host"] or 0),
        gpu_model=str(r["gpu_model"] or ""), n_hosts=int(r["n_hosts"] or 0),
    ) for r in store.rows("the job list", _JOBS_SQL)]


def pick_job(jobs: list[JobInfo], wanted: str | None) -> JobInfo | None:
    """The job named in the URL, else the most recently active one."""
    for j in jobs:
        if j.job_id == wanted:
            return j
    return jobs[0] if jobs and wanted is None else None


def job_window(job: JobInfo, range_s: int | None) -> Window:
    return window_for(job.job_id, job.first_ms, job.last_ms, range_s)
