"""The time window a page looks at, and the SQL fragments that bind it.

A window is anchored at the job's latest event (its event-time clock), not the wall
clock: a replayed or simulated job is shown the same way as a live one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

NICE_BUCKETS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)

T0 = "fromUnixTimestamp64Milli({t0:Int64}, 'UTC')"
T1 = "fromUnixTimestamp64Milli({t1:Int64}, 'UTC')"
"""The window's start and end as SQL; t0/t1 are epoch milliseconds bound as Int64 (also bounds for `Table.buckets`)."""


def ts_in_window(col: str = "ts") -> str:
    """`col` in [t0, t1]."""
    return f"{col} >= {T0} AND {col} <= {T1}"


def to_dt(ms: Any) -> datetime:
    return datetime.fromtimestamp(int(ms) / 1000, tz=UTC)


@dataclass(frozen=True, kw_only=True)
class Window:
    job: str
    start_ms: int
    end_ms: int

    @property
    def seconds(self) -> float:
        return max(0.001, (self.end_ms - self.start_ms) / 1000)

    def params(self, **extra: Any) -> dict[str, Any]:
        return {"job": self.job, "t0": self.start_ms, "t1": self.end_ms, **extra}

    def bucket_s(self, max_points: int, minimum: int = 1) -> int:
        """The smallest nice bucket giving at most `max_points` buckets (and >= `minimum`)."""
        for b in NICE_BUCKETS_S:
            if b >= minimum and self.seconds / b <= max_points:
                return b
        return NICE_BUCKETS_S[-1]


def window_for(job: str, first_ms: int, last_ms: int, range_s: int | None) -> Window:
    start = first_ms if range_s is None else max(first_ms, last_ms - range_s * 1000)
    return Window(job=job, start_ms=start, end_ms=last_ms)
