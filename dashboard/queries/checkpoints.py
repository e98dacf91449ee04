"""Checkpoints of one job: the latest complete one, how old it is, and what each save cost.

A checkpoint is complete once rank 0 published `committed` (the commit marker is written
last); its age is counted against the job's latest step and its event-time clock, never the
wall clock. The time a save blocked training is the slowest rank's `staged` time for that
step (every rank blocks while its state is copied to host memory).
"""

from __future__ import annotations

from dataclasses import dataclass

from vigil.dashboard.queries.window import Window, ts_in_window
from vigil.dashboard.store import Store
from vigil.dashboard.tables import CHECKPOINTS, JOB_CLOCK, JOB_STEPS

_LATEST_SQL = f"""
SELECT argMax(step, ts) AS step, toUnixTimestamp64Milli(max(ts)) AS ts_ms, argMax(path, ts) AS path,
       argMax(duration_ms, ts) AS duration_ms, count() AS committed,
       (SELECT max(step) FROM {JOB_STEPS} WHERE job_id = {{job:String}}) AS job_step,
       (SELECT toUnixTimestamp64Milli(max(last_ts)) FROM {JOB_CLOCK} WHERE job_id = {{job:String}}) AS clock_ms,
       (SELECT countIf(phase = 'failed') FROM {CHECKPOINTS} WHERE job_id = {{job:String}}) AS failed,
       (SELECT countIf(phase = 'skipped') FROM {CHECKPOINTS} WHERE job_id = {{job:String}}) AS skipped
FROM {CHECKPOINTS} WHERE job_id = {{job:String}} AND phase = 'committed'
"""

_SAVES_SQL = f"""
SELECT step, toUnixTimestamp64Milli(min(ts)) AS t_ms, maxIf(blocked_ms, phase = 'staged') AS blocked_ms,
       maxIf(duration_ms, phase = 'persisted') AS persist_ms, sumIf(bytes, phase = 'staged') AS bytes,
       countIf(phase = 'committed') > 0 AS committed, countIf(phase = 'failed') > 0 AS failed,
       anyIf(error, phase IN ('failed', 'skipped') AND error != '') AS error
FROM {CHECKPOINTS} WHERE job_id = {{job:String}} AND {ts_in_window()}
GROUP BY step ORDER BY step DESC LIMIT {{limit:UInt32}}
"""


@dataclass(frozen=True, kw_only=True)
class Latest:
    step: int
    ts_ms: int
    path: str
    age_steps: int | None  # the job's latest step - this one
    age_s: float | None  # the job's event-time clock - when it was committed
    committed: int
    failed: int
    skipped: int


@dataclass(frozen=True, kw_only=True)
class Save:
    step: int
    t_ms: int
    blocked_ms: float
    persist_ms: float
    bytes: int
    committed: bool
    failed: bool
    error: str


def latest(store: Store, job: str) -> Latest | None:
    """The latest complete checkpoint of `job`, or None when it has none."""
    row = store.one("the latest checkpoint", _LATEST_SQL, {"job": job})
    if row is None or not row["committed"]:
        return None
    step, ts_ms = int(row["step"]), int(row["ts_ms"])
    job_step, clock_ms = row["job_step"], row["clock_ms"]
    return Latest(step=step, ts_ms=ts_ms, path=str(row["path"]),
                  age_steps=None if job_step is None else max(0, int(job_step) - step),
                  age_s=None if clock_ms is None else max(0.0, (int(clock_ms) - ts_ms) / 1000),
                  committed=int(row["committed"]), failed=int(row["failed"]), skipped=int(row["skipped"]))


def saves(store: Store, window: Window, limit: int = 50) -> list[Save]:
    """The newest saves in the window (newest first), one per step."""
    rows = store.rows("checkpoint saves", _SAVES_SQL, {**window.params(), "limit": limit})
    return [Save(step=int(r["step"]), t_ms=int(r["t_ms"]), blocked_ms=float(r["blocked_ms"]),
                 persist_ms=float(r["persist_ms"]), bytes=int(r["bytes"]), committed=bool(r["committed"]),
                 failed=bool(r["failed"]), error=str(r["error"] or "")) for r in rows]
