"""What every detector shares: the evaluation context, findings, and row access.

A detector evaluates one job "as of" an event-time instant `at`, seeing only data
stamped at or before it, so the same code serves live evaluation, catch-up after a
burst of fast simulated telemetry, and `vigil analyzer replay`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from vigil.analyzer.settings import AnalyzerSettings
from vigil.clickhouse.query import QueryClient

Severity = Literal["info", "warning", "error", "critical"]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, kw_only=True)
class Finding:
    """A condition that holds now; the alert book turns findings into alert events."""

    alert: str
    subject: str
    host: str
    severity: Severity
    summary: str
    since: datetime
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class EvalContext:
    client: QueryClient
    settings: AnalyzerSettings
    job: str
    at: datetime
    live: bool = False
    firing: frozenset[str] = frozenset()  # subjects of this job's firing alerts, as "alert:subject"

    def is_firing(self, alert: str, subject: str) -> bool:
        return f"{alert}:{subject}" in self.firing

    def rows(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        params = {"job": self.job, "at": ch_time(self.at), **params}
        result = self.client.query(sql, parameters=params)
        names = list(result.column_names)
        return [dict(zip(names, r, strict=True)) for r in result.result_rows]

    def ago(self, seconds: float) -> str:
        return ch_time(self.at - timedelta(seconds=seconds))


class Detector(Protocol):
    name: str

    def detect(self, ctx: EvalContext) -> list[Finding]: ...


def ch_time(ts: datetime) -> str:
    """A parameter value for `{x:DateTime64(3, 'UTC')}`."""
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


AT = "{at:DateTime64(3, 'UTC')}"


def as_utc(value: Any) -> datetime:
    """A timestamp from ClickHouse (naive UTC datetime) or from the proxy (ISO string) as aware UTC."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, str):
        return as_utc(datetime.fromisoformat(value))
    raise ValueError(f"not a timestamp: {value!r}")


def median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    if n == 0:
        raise ValueError("median of nothing")
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def last_complete_step(ctx: EvalContext) -> int | None:
    """The job's highest step whose every reported rank is stamped at or before `at`."""
    rows = ctx.rows(
        f"SELECT step FROM job_steps WHERE job_id = {{job:String}} GROUP BY step "
        f"HAVING max(last_ts) <= {AT} ORDER BY step DESC LIMIT 1"
    )
    return int(rows[0]["step"]) if rows else None
