"""The analyzer's ClickHouse schema: its migrations (tables, rollups, views) and their number range.

The analyzer owns every telemetry table it ingests into and the rollups its detectors
read; other components that read them (the dashboard) declare the columns they use and
are checked against this schema by the test suite.
"""

from __future__ import annotations

from pathlib import Path

from vigil.clickhouse.migrations import MigrationSet

MIGRATIONS = MigrationSet(owner="analyzer", directory=Path(__file__).parent / "migrations", ids=range(1, 200),
                          more=(range(1000, 1200),))

ROLLUP_WINDOW_STEPS = 5
"""Steps per window of the `phase_host_windows` rollups (`intDiv(step, 5)` in migrations 0100 and 0150: a fact of the
schema, checked against every migration by tests/backbone/test_one_home.py)."""

MINUTE_FIRST = frozenset({"nic_counters", "heartbeats"})
"""Raw tables sorted by (job_id, `MINUTE`, ...) (migration 0198). The engine does not derive a bound on `MINUTE` from
one on `ts` (a DateTime64): a read bounded in time names it (`minutes`), or it selects a granule per minute of the
job."""
MINUTE = "toStartOfMinute({})"  # over the time column (or a bound of it)


def minutes(lo: str, hi: str = "") -> str:
    """The minutes of `ts` in [`lo`, `hi`] (SQL bounds of `ts`; no `hi`: unbounded above) on a `MINUTE_FIRST` table:
    implied by the same bounds on `ts`, and what the engine prunes by."""
    key = MINUTE.format("ts")
    return f"{key} >= {MINUTE.format(lo)}" + (f" AND {key} <= {MINUTE.format(hi)}" if hi else "")


def window(lo: str, hi: str) -> str:
    """`lo < ts <= hi` on a `MINUTE_FIRST` table, with both minutes' bounds: an instant judged in the past (a replay, a
    catch-up) selects the minutes of its window, not every minute from there to the job's newest."""
    return f"ts > {lo} AND ts <= {hi} AND {minutes(lo, hi)}"
