"""Heartbeat and step rows written straight into the analyzer's tables with the time they were ingested (what
the gone-lag and topic-skew tests need)."""

from __future__ import annotations

from datetime import datetime


def sql_time(t: datetime) -> str:
    """`t` as a ClickHouse DateTime64(3) literal."""
    return f"toDateTime64('{t:%Y-%m-%d %H:%M:%S.%f}', 3, 'UTC')"


def steps_insert(job: str, host: str, times: list[datetime], ingested: list[datetime]) -> str:
    """An INSERT of one step per time of `times`, each stored at its `ingested` time."""
    rows = ", ".join(f"('{job}-{host}-s{i}', '{job}', '{host}', 0, 0, 1, 0, 0, 0, {i}, {sql_time(t)}, 1000.0, 0, 0, {sql_time(w)})"
                     for i, (t, w) in enumerate(zip(times, ingested, strict=True)))
    return ("INSERT INTO step_timings (event_id, job_id, host, rank, local_rank, world_size, dp, tp, pp, step, ts, "
            f"step_ms, failed, dropped, ingested_at) VALUES {rows}")
