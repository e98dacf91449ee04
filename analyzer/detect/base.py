"""What every detector shares: the evaluation context, findings, the job's run, and row access.

A detector evaluates one job "as of" an event-time instant `at`, seeing only data
stamped at or before it, so the same code serves live evaluation, catch-up after a
burst of fast simulated telemetry, and `vigil analyzer replay`.

The context carries the job's current run (`Epoch`, see detect/epoch.py): every baseline
is taken from the run's own steps after its warm-up, never from absolute step numbers,
and per-step reads are bounded to the run's recent step range, so the cost of an
instant does not grow with the job's history. Live, it also carries each source's
ingest progress (`sources`), so a detector can tell data that is missing from data that
is late; in replay the stored history is complete and `sources` is None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any, Literal, Protocol

from vigil.analyzer.schema import window
from vigil.analyzer.settings import AnalyzerSettings
from vigil.clickhouse.query import QueryClient, QueryResult
from vigil.contract.severity import Severity as Severity

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
RUN_BUCKET_S = 10
"""Seconds of event time per bucket of `job_step_runs` and `job_step_spans` (fixed by migration 0130)."""


def bucket_of(ts: datetime) -> datetime:
    """The `job_step_runs` bucket holding `ts`."""
    secs = (ts - EPOCH).total_seconds()
    return EPOCH + timedelta(seconds=secs - secs % RUN_BUCKET_S)


@dataclass(frozen=True, kw_only=True)
class Epoch:
    """One run of a job as of an instant: from its (re)start to now.

    `start` is when the run began (its registration, or its first step), `first_step` its
    first step number; `step_lo`..`step_hi` bounds the step numbers that can hold the run's
    newest complete step at the instant (for bounded reads).
    """

    index: int
    start: datetime
    first_step: int
    reason: Literal["start", "registration", "step_back", "step_jump", "gap"]
    step_lo: int
    step_hi: int

    @property
    def bucket(self) -> datetime:
        return bucket_of(self.start)

    def describe(self) -> dict[str, Any]:
        return {"index": self.index, "start": self.start.isoformat(), "first_step": self.first_step,
                "reason": self.reason}


@dataclass(frozen=True, kw_only=True)
class SourceClock:
    """Live ingest progress of one host's source: newest event time stored, when (wall), and whether it still arrives."""

    last_ts: datetime
    ingested: datetime
    alive: bool


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


class NotYet(Exception):
    """A verdict would rest on data that may still be in flight (live only): the instant is not judged now; the live
    cursor judges it again at its next turn, when the ingest has stored more (replay never raises it)."""


@dataclass(frozen=True, kw_only=True)
class EvalContext:
    client: QueryClient
    settings: AnalyzerSettings
    job: str
    at: datetime
    live: bool = False
    firing: frozenset[str] = frozenset()  # subjects of this job's firing alerts, as "alert:subject"
    epoch_of: Callable[[], Epoch | None] | None = None  # the job's run at `at`, asked on first use (see `epoch`)
    sources: Mapping[tuple[str, str], SourceClock] | None = None  # (host, source) -> progress; None in replay
    memo: dict[str, Any] = field(default_factory=dict)  # what several detectors ask at this instant, asked once
    state: dict[str, Any] = field(default_factory=dict)  # per job, kept across the instants of one walk (see `Walk`)
    present: frozenset[str] | None = None  # the sources the job has stored anything of; None: unknown (all)
    frontiers: Mapping[str, datetime] | None = None  # topic -> wall time before which all produced to it is stored

    def stored_before(self, topic: str, wall: datetime) -> bool:
        """Whether everything produced to `topic` before `wall` is stored: its ingest frontier (every partition
        committed past its end offset at that time) has passed `wall`. Always true in replay (`frontiers` None)."""
        if self.frontiers is None:
            return True
        f = self.frontiers.get(topic)
        return f is not None and f >= wall

    @cached_property
    def epoch(self) -> Epoch | None:
        """The job's run at `at` (None before its first step), read once per instant and only when a detector
        asks: an instant at which no detector is due, and no log or exit is stored, reads nothing."""
        return self.epoch_of() if self.epoch_of is not None else None

    def is_firing(self, alert: str, subject: str) -> bool:
        return f"{alert}:{subject}" in self.firing

    def caught_up(self, host: str, source: str) -> bool:
        """Whether `host`'s `source` is known up to `at`: stored up to it, or silent (its agent sends nothing).

        Always true in replay. Live, false for a source still arriving but not yet up to `at`
        (a lagging partition, a spool being replayed): its silence there is not news. False too
        for a source the turn's clock does not know: its first events were stored after the
        clock was read (the ingest writes while detectors query), so it is arriving right now;
        the next turn knows how far it has got.
        """
        if self.sources is None:
            return True
        c = self.sources.get((host, source))
        return c is not None and (not c.alive or c.last_ts >= self.at)

    def stored(self, source: str) -> bool:
        """Whether the job may have rows of `source` (clock.py's DENSE/SPARSE names) at all: false only when the
        clock knows it has none, so a detector of a source the job never sent skips its query."""
        return self.present is None or source in self.present

    def run_buckets(self) -> dict[str, str]:
        """Parameters `b0`, `b1`: the `job_step_runs` buckets of the current run up to `at`."""
        start = self.epoch.bucket if self.epoch is not None else EPOCH
        return {"b0": ch_time(start), "b1": ch_time(bucket_of(self.at))}

    def rows(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        result = self._query(sql, params)
        names = list(result.column_names)
        return [dict(zip(names, r, strict=True)) for r in result.result_rows]

    def columns(self, sql: str, **params: Any) -> dict[str, Sequence[Any]]:
        """Like `rows`, a column per name: for results of many rows (no dict per row)."""
        result = self._query(sql, params)
        names = list(result.column_names)
        cols = list(zip(*result.result_rows, strict=True)) or [() for _ in names]
        return dict(zip(names, cols, strict=True))

    def _query(self, sql: str, params: Mapping[str, Any]) -> QueryResult:
        return self.client.query(sql, parameters={"job": self.job, "at": ch_time(self.at), **params})

    def ago(self, seconds: float) -> str:
        return ch_time(self.at - timedelta(seconds=seconds))

    def run_start(self) -> str:
        """When the current run began (the epoch's start; the beginning of time before the first step)."""
        return ch_time(self.epoch.start if self.epoch is not None else EPOCH)

    def ago_in_run(self, seconds: float) -> str:
        """`ago(seconds)`, but not before the current run began: a baseline window never spans a restart."""
        t = self.at - timedelta(seconds=seconds)
        return ch_time(max(t, self.epoch.start) if self.epoch is not None else t)


class Detector(Protocol):
    name: str
    # The false alerts (warning or worse) it may raise per healthy job-hour at 512 hosts x 8 GPUs; the
    # detectors' budgets add up to the fleet's (<= 1, analyzer/README.md); bench/detection_physics.py scores them.
    false_alarms_per_hour: float

    def detect(self, ctx: EvalContext) -> list[Finding]: ...


@dataclass(kw_only=True)
class Walk:
    """What the engine keeps for one job across the instants of one walk (a replay, or the live cursor's).

    `carried`: each detector's findings at the last instant it ran (a detector with a `cadence_s`
    longer than the grid runs only at the instants that are multiples of it; in between its
    findings stand as they were). `state`: a detector's own memo (`ctx.state`), e.g. the last
    window it judged healthy. Live and replay walk the same grid from the same first instant,
    so both run each detector at the same instants.
    """

    carried: dict[str, list[Finding]] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)


def due(d: Detector, at: datetime, step_s: float) -> bool:
    """Whether detector `d` runs at grid instant `at`: every instant, or each multiple of its `cadence_s` plus its
    `cadence_phase_s` (0 unless set: detectors of one cadence that cost the most are spread over its instants, so no
    instant runs them all)."""
    cadence = float(getattr(d, "cadence_s", 0.0) or 0.0)
    every = max(1, round(cadence / step_s)) if cadence > step_s else 1
    if every == 1:
        return True
    phase = round(float(getattr(d, "cadence_phase_s", 0.0) or 0.0) / step_s)
    ms = (at - EPOCH) // timedelta(milliseconds=1)
    return (ms // max(1, round(step_s * 1000)) - phase) % every == 0


def ch_time(ts: datetime) -> str:
    """A parameter value for `{x:DateTime64(3, 'UTC')}`."""
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


AT = "{at:DateTime64(3, 'UTC')}"
RAW_WINDOW = window("{lo:DateTime64(3, 'UTC')}", AT)
"""`lo < ts <= at` on nic_counters or heartbeats (`schema.MINUTE_FIRST`): a window read selects the granules of the
minutes it spans, however long the job has run and wherever the instant is (tests/analyzer/test_raw_layout.py)."""


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


RUN = "bucket >= {b0:DateTime64(3, 'UTC')} AND bucket <= {b1:DateTime64(3, 'UTC')}"
"""`job_step_runs` rows of the current run up to `at` (with `ctx.run_buckets()`)."""


def last_complete_step(ctx: EvalContext) -> int | None:
    """The current run's highest step whose every reported rank is stamped at or before `at`."""
    e = ctx.epoch
    if e is None:
        return None
    if "last_complete_step" in ctx.memo:
        return ctx.memo["last_complete_step"]  # type: ignore[no-any-return]
    rows = ctx.rows(
        f"SELECT step FROM job_step_runs WHERE job_id = {{job:String}} AND step >= {{lo:UInt64}} "
        f"AND step <= {{hi:UInt64}} AND {RUN} GROUP BY step HAVING max(last_ts) <= {AT} ORDER BY step DESC LIMIT 1",
        lo=e.step_lo, hi=e.step_hi, **ctx.run_buckets())
    ctx.memo["last_complete_step"] = int(rows[0]["step"]) if rows else None
    return ctx.memo["last_complete_step"]  # type: ignore[no-any-return]
