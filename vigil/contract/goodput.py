"""The one definition of a job's effective training time ratio (ETTR, goodput), in Python and in SQL.

ETTR = productive steps x ideal step time / wall clock, where
- productive steps: the distinct steps the ranks completed (a step redone after a restart counts once);
- ideal step time: the median of the step times at or under median + 3 MAD (steps slowed by a straggler,
  a stall or a restart are not the ideal);
- wall clock: from the start of the job's first step (its first record less one ideal step) to the job's
  latest event (its event-time clock: steps, heartbeats, NIC samples), never the reader's clock, so a hang
  still going on lowers it and a finished job keeps its final ratio.

Every page, command and metric reads this: `ettr()` and `ideal_step_ms()` for Python, `per_job_sql()` for
ClickHouse (built from the same rule; tests/contract/test_goodput_definition.py ties the two).
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median

MAD_K = 3.0  # step times above median + MAD_K x MAD are slowed, not ideal


def ideal_step_ms(times: Sequence[float]) -> float | None:
    """The ideal step time (ms) of a job's per-step times: the median of those at or under median + 3 MAD."""
    if not times:
        return None
    med = median(times)
    mad = median(abs(t - med) for t in times)
    return float(median(t for t in times if t <= med + MAD_K * mad))


def ettr(steps: int, ideal_ms: float | None, first_ms: float, end_ms: float) -> float | None:
    """The ratio of `steps` at `ideal_ms` over the wall clock from the first step's record (`first_ms`,
    epoch ms) less one ideal step to the job's latest event (`end_ms`); None with no step."""
    if steps <= 0 or ideal_ms is None:
        return None
    wall = end_ms - first_ms + ideal_ms
    return min(1.0, steps * ideal_ms / wall) if wall > 0 else None


_MEDIAN = "arrayReduce('quantileExactInclusive(0.5)', {})"


def per_job_sql(steps: str, extra: str = "") -> str:
    """A SELECT over `steps` (a table or CTE with one row per (job_id, step): step_ms, s_first_ts, s_last_ts)
    giving per job: steps, last_step, ideal_step_ms, median_step_ms, first_ms, last_ms (epoch ms), and the
    `extra` aggregate columns (", ..."), if any."""
    med = _MEDIAN.format("times")
    mad = _MEDIAN.format(f"arrayMap(t -> abs(t - {med}), times)")
    ideal = _MEDIAN.format(f"arrayFilter(t -> t <= {med} + {MAD_K} * {mad}, times)")
    return f"""
SELECT job_id, count() AS steps, max(step) AS last_step, groupArray(toFloat64(step_ms)) AS times,
       {ideal} AS ideal_step_ms, {med} AS median_step_ms,
       toUnixTimestamp64Milli(min(s_first_ts)) AS first_ms, toUnixTimestamp64Milli(max(s_last_ts)) AS last_ms{extra}
FROM {steps} GROUP BY job_id"""


def ettr_sql(steps: str, ideal_ms: str, first_ms: str, end_ms: str) -> str:
    """`ettr()` as a ClickHouse expression over column expressions (NULL with no step)."""
    wall = f"({end_ms} - {first_ms} + {ideal_ms})"
    return f"if({steps} > 0 AND {wall} > 0, least(1.0, {steps} * {ideal_ms} / {wall}), NULL)"
