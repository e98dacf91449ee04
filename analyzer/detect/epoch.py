"""A job's runs (epochs): where each (re)start begins, found from its step numbers over time.

A job's steps normally climb one by one. A new run begins (a new `Epoch`) when:

    registration   a `JobRegistered` stamped after the previous steps (a launcher, or the
                   recovery controller's restart, registered the job again)
    step_back      the steps go back by `epoch.back_steps` or more (restarted from a checkpoint)
    step_jump      the steps jump ahead by `epoch.jump_steps` or more (resumed from a newer one)
    gap            steps resume after `epoch.gap_s` without any (restarted right after a checkpoint)

The first run of a job starts at its first step, whatever its number (a job that resumes at
step 4800 has its baselines at 4820+, not 20+).

Runs are found on `job_step_spans` (per 10-second bucket: the step numbers in it; a view over
`job_step_runs` since migration 0199), folding the buckets in time order. A bucket counts once
it is complete as of the instant (it ends at or before it), so live and replay see a run begin
at the same instant whatever the arrival order; a recent bucket whose rows changed after it was
folded has the runs folded again (`EpochTracker`); until a job's first bucket completes, its
first run is read from the raw rows stamped up to the instant. `EpochTracker` keeps one job's
fold, reading only the buckets that completed since its last call: a few keyed rows per
instant, the history once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from vigil.analyzer.detect.base import AT, EPOCH, RUN_BUCKET_S, Epoch, as_utc, bucket_of, ch_time
from vigil.analyzer.settings import EpochSettings
from vigil.clickhouse.query import QueryClient

RECENT_STEPS = 50
"""The newest complete step is sought this far below the newest step of the run's complete buckets."""

SPANS_SQL = """
SELECT bucket, min(min_step) AS min_step, max(max_step) AS max_step, min(first_ts) AS first_ts,
       max(last_ts) AS last_ts
FROM job_step_spans
WHERE job_id = {job:String} AND bucket > {after:DateTime64(3, 'UTC')} AND bucket <= {upto:DateTime64(3, 'UTC')}
GROUP BY bucket ORDER BY bucket
"""

_REGS_SQL = """
SELECT DISTINCT ts FROM job_registrations
WHERE job_id = {job:String} AND ts > {after:DateTime64(3, 'UTC')} AND ts <= {upto:DateTime64(3, 'UTC')} ORDER BY ts
"""

_FIRST_SQL = f"""
SELECT min(step) AS first_step, max(step) AS last_step, min(ts) AS first_ts, count() AS n FROM step_timings
WHERE job_id = {{job:String}} AND step >= {{lo:UInt64}} AND step <= {{hi:UInt64}} AND ts <= {AT}
"""


@dataclass(frozen=True, kw_only=True)
class SpanRow:
    bucket: datetime
    min_step: int
    max_step: int
    first_ts: datetime
    last_ts: datetime


@dataclass(kw_only=True)
class EpochFold:
    """The runs found so far over complete buckets, folded in time order."""

    settings: EpochSettings
    epochs: list[Epoch] = field(default_factory=list)
    run_max: int = 0  # newest step of the current run (its first bucket counts by its first step only)
    last_ts: datetime = EPOCH  # newest step timestamp folded
    final_max: int = 0  # newest step in the current run's complete buckets

    def add(self, row: SpanRow, registrations: Sequence[datetime] = ()) -> None:
        """Fold the next complete bucket; `registrations` = those stamped after the previous bucket's steps."""
        s = self.settings
        reason: Any = None
        start = row.first_ts
        if not self.epochs:
            reason = "start"
            start = min([row.first_ts, *registrations])
        elif registrations:
            reason, start = "registration", max(registrations)
        elif row.min_step + s.back_steps <= self.run_max:
            reason = "step_back"
        elif row.min_step >= self.run_max + s.jump_steps:
            reason = "step_jump"
        elif (row.first_ts - self.last_ts).total_seconds() >= s.gap_s:
            reason = "gap"
        if reason is not None:
            self.epochs.append(Epoch(index=len(self.epochs), start=start, first_step=row.min_step, reason=reason,
                                     step_lo=row.min_step, step_hi=row.max_step))
            # a restart's first bucket may still hold the old run's last steps: only its first step counts
            self.run_max = row.min_step if reason == "step_back" else row.max_step
            self.final_max = self.run_max
        else:
            self.run_max = max(self.run_max, row.max_step)
            self.final_max = max(self.final_max, row.max_step)
        self.last_ts = max(self.last_ts, row.last_ts)

    def current(self, partial_max: int | None) -> Epoch | None:
        """The current run, its step bounds widened to the incomplete bucket's newest step."""
        if not self.epochs:
            return None
        e = self.epochs[-1]
        lo = max(e.first_step, self.final_max - RECENT_STEPS)
        hi = max(self.final_max, partial_max if partial_max is not None else self.final_max)
        return replace(e, step_lo=lo, step_hi=hi)


def fold(rows: Sequence[SpanRow], registrations: Sequence[datetime], settings: EpochSettings) -> list[Epoch]:
    """Every run found in complete buckets `rows` (time order) and registration stamps (pure; for tests)."""
    f = EpochFold(settings=settings)
    regs = sorted(registrations)
    prev = EPOCH
    for row in rows:
        f.add(row, [r for r in regs if prev < r <= row.last_ts])
        prev = row.last_ts
    return f.epochs


RECHECK_S = 300
"""Folded buckets this recent (event time, before the newest complete one) are read again at every call; one that
changed since it was folded (rows landed after it was read) has the job's runs folded again from the start."""


@dataclass(kw_only=True)
class EpochTracker:
    """One job's runs, kept up to date as the instants it is asked about advance.

    A bucket is folded once it is complete as of the instant, but its rows may land after that: a
    late host, or a read that ran while the insert that carries them was writing its views (a view
    of the job's clock may be written before `job_step_spans`). So the folded buckets of the last
    `RECHECK_S` are read again at each call (with the incomplete one, in the same query) and
    compared with what was folded: when one differs, the runs are folded again from the job's
    first bucket, and live converges to what replay finds (it folds each bucket once, whole).
    """

    job: str
    settings: EpochSettings
    _fold: EpochFold | None = None
    _loaded: datetime = EPOCH  # buckets up to here are folded
    _regs_after: datetime = EPOCH
    _folded: dict[datetime, SpanRow] = field(default_factory=dict)  # the recent folded buckets, as folded
    refolds: int = 0

    def at(self, client: QueryClient, at: datetime) -> Epoch | None:
        if self._fold is None:
            self._fold = EpochFold(settings=self.settings)
        final = bucket_of(at) - timedelta(seconds=RUN_BUCKET_S)  # the newest bucket that ended by `at`
        horizon = final - timedelta(seconds=RECHECK_S)
        # one read: the recent folded buckets (again), the complete ones not folded yet, the incomplete one
        rows = self._spans(client, min(horizon, self._loaded), bucket_of(at))
        if any(self._folded.get(r.bucket) != r for r in rows if horizon < r.bucket <= self._loaded):
            self._fold, self._loaded, self._regs_after, self._folded = EpochFold(settings=self.settings), EPOCH, EPOCH, {}
            self.refolds += 1
            return self.at(client, at)  # from the first bucket (nothing is folded: no second refold)
        new = [r for r in rows if self._loaded < r.bucket <= final]
        if new:  # read everything first: a failed query leaves the fold as it was
            regs = self._registrations(client, new[-1].last_ts)
            prev = self._fold.last_ts
            for row in new:
                self._fold.add(row, [r for r in regs if prev < r <= row.last_ts])
                prev = row.last_ts
            self._regs_after = max(self._regs_after, new[-1].last_ts)
        self._loaded = max(self._loaded, final)
        self._folded = {**{b: r for b, r in self._folded.items() if b > horizon},  # (those this read did not reach)
                        **{r.bucket: r for r in rows if horizon < r.bucket <= self._loaded}}
        partial = [r for r in rows if r.bucket > final]
        epoch = self._fold.current(partial[0].max_step if partial else None)
        if epoch is None and partial:
            return self._first(client, at, partial[0])
        return epoch

    def _spans(self, client: QueryClient, after: datetime, upto: datetime) -> list[SpanRow]:
        res = client.query(SPANS_SQL, parameters={"job": self.job, "after": ch_time(after), "upto": ch_time(upto)})
        return [SpanRow(bucket=as_utc(r[0]), min_step=int(r[1]), max_step=int(r[2]), first_ts=as_utc(r[3]),
                        last_ts=as_utc(r[4])) for r in res.result_rows]

    def _registrations(self, client: QueryClient, upto: datetime) -> list[datetime]:
        if upto <= self._regs_after:
            return []
        res = client.query(_REGS_SQL, parameters={"job": self.job, "after": ch_time(self._regs_after),
                                                  "upto": ch_time(upto)})
        return [as_utc(r[0]) for r in res.result_rows]

    def _first(self, client: QueryClient, at: datetime, partial: SpanRow) -> Epoch | None:
        """The job's first run before its first bucket completes: from its raw rows up to `at`."""
        res = client.query(_FIRST_SQL, parameters={"job": self.job, "at": ch_time(at), "lo": partial.min_step,
                                                   "hi": partial.max_step})
        first, last, ts, n = res.result_rows[0]
        if not int(n):
            return None
        return Epoch(index=0, start=as_utc(ts), first_step=int(first), reason="start", step_lo=int(first),
                     step_hi=int(last))
