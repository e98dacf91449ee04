"""The detector engine: evaluate every detector for a job at event-time points.

`evaluate` runs each detector at one instant and turns its findings into alert events
through the book. `LiveCursor` walks each active job's event-time clock forward in
`eval_step_s` steps (at most `max_catchup` per turn), so a burst of fast simulated
telemetry is judged at the same instants a replay would use. `replay` does the same
over stored history with a fresh book and publishes nothing.

The live clock of a job is its watermark, not its newest timestamp: each host's sources
(steps, heartbeats, NIC samples) arrive on their own partitions and catch up at their own
pace, so the cursor stops at the earliest `last_ts` among the sources still being
ingested. A source with nothing ingested for `watermark_idle_s` of wall clock (a dead
agent, a lost host) no longer holds the clock back; that silence is for the heartbeat
detector to report. Nor does a source more than `watermark_max_lag_s` of event time
behind the job's newest timestamp (a host replaying a long spool after an outage): the
rest of the job is not left unjudged for that long.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from vigil.analyzer.alerts.book import AlertBook
from vigil.analyzer.detect.base import Detector, EvalContext, as_utc
from vigil.analyzer.detect.flap import FlapDetector
from vigil.analyzer.detect.heartbeat import HeartbeatDetector
from vigil.analyzer.detect.logs import ExitDetector, LogDetector
from vigil.analyzer.detect.mfu import MfuDriftDetector
from vigil.analyzer.detect.straggler import StragglerDetector
from vigil.analyzer.detect.traffic import TrafficDetector
from vigil.analyzer.settings import AnalyzerSettings
from vigil.clickhouse.query import QueryClient
from vigil.contract import Alert
from vigil.errors import one_line

log = logging.getLogger(__name__)

DETECTORS: tuple[Detector, ...] = (
    StragglerDetector(), TrafficDetector(), FlapDetector(), MfuDriftDetector(), HeartbeatDetector(), LogDetector(),
    ExitDetector(),
)


@dataclass(frozen=True, kw_only=True)
class JobClock:
    job: str
    first_ts: datetime
    last_ts: datetime
    watermark: datetime  # every source still arriving has been ingested up to here


_CLOCKS_SQL = """
SELECT job_id, min(first) AS first_ts, max(last) AS last_ts,
       if(countIf(alive) = 0, max(last), minIf(last, alive)) AS watermark
FROM (SELECT job_id, host, source, min(first_ts) AS first, max(last_ts) AS last,
             max(last_ingested) > now64(3) - toIntervalMillisecond({idle_src:UInt64}) AS alive,
             max(last_ingested) AS ingested
      FROM host_clock WHERE $where GROUP BY job_id, host, source)
GROUP BY job_id HAVING $having ORDER BY job_id
"""


def job_clocks(client: QueryClient, job: str | None = None, idle_s: float | None = None,
               source_idle_s: float = 5.0) -> list[JobClock]:
    """Event-time span and watermark of each job; with `idle_s`, only jobs with anything ingested that recently (wall)."""
    params: dict[str, object] = {"idle_src": int(source_idle_s * 1000)}
    where = "1"
    if job is not None:
        where = "job_id = {job:String}"
        params["job"] = job
    having = "1"
    if idle_s is not None:
        having = "max(ingested) > now64(3) - toIntervalMillisecond({idle:UInt64})"
        params["idle"] = int(idle_s * 1000)
    res = client.query(_CLOCKS_SQL.replace("$where", where).replace("$having", having), parameters=params)
    return [JobClock(job=str(r[0]), first_ts=as_utc(r[1]), last_ts=as_utc(r[2]), watermark=as_utc(r[3]))
            for r in res.result_rows]


def evaluate(client: QueryClient, settings: AnalyzerSettings, book: AlertBook, job: str, at: datetime,
             live: bool = False, detectors: Sequence[Detector] = DETECTORS, errors: list[str] | None = None) -> list[Alert]:
    """Run the detectors for `job` as of `at`; the alert events this instant produces."""
    ctx = EvalContext(client=client, settings=settings, job=job, at=at, live=live, firing=book.firing_subjects(job))
    findings = []
    ran = []
    for d in detectors:
        try:
            findings.extend(d.detect(ctx))
            ran.append(d.name)
        except Exception as exc:  # one broken detector must not silence the others
            msg = f"{d.name} on {job} at {at.isoformat()}: {one_line(exc)}"
            log.warning("detector failed: %s", msg)
            if errors is not None:
                errors.append(msg)
    return book.update(job, at, ran, findings)


def instants(start: datetime, end: datetime, step_s: float) -> list[datetime]:
    """start, start+step, ... up to and including `end`."""
    if end < start:
        return []
    n = int((end - start).total_seconds() // step_s)
    points = [start + timedelta(seconds=i * step_s) for i in range(n + 1)]
    if points[-1] < end:
        points.append(end)
    return points


def replay(client: QueryClient, settings: AnalyzerSettings, job: str, start: datetime | None = None,
           end: datetime | None = None) -> list[Alert]:
    """Alert events the detectors would have raised over `job`'s stored history."""
    clocks = job_clocks(client, job=job)
    if not clocks:
        raise ValueError(f"no telemetry stored for job {job!r}")
    lo = max(start, clocks[0].first_ts) if start else clocks[0].first_ts
    hi = min(end, clocks[0].last_ts) if end else clocks[0].last_ts
    book = AlertBook(refresh_s=settings.refresh_s)
    out: list[Alert] = []
    for at in instants(lo, hi, settings.eval_step_s):
        out.extend(evaluate(client, settings, book, job, at))
    return out


@dataclass(kw_only=True)
class LiveCursor:
    """Per-job position of the live evaluation on the event-time clock."""

    settings: AnalyzerSettings
    book: AlertBook
    positions: dict[str, datetime] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def turn(self, client: QueryClient) -> list[Alert]:
        s = self.settings
        out: list[Alert] = []
        for clock in job_clocks(client, idle_s=s.job_idle_s, source_idle_s=s.watermark_idle_s):
            until = max(clock.watermark, clock.last_ts - timedelta(seconds=s.watermark_max_lag_s))
            pos = self.positions.get(clock.job)
            if pos is None:
                pos = until - timedelta(seconds=s.eval_step_s)
            points = instants(pos + timedelta(seconds=s.eval_step_s), until, s.eval_step_s)
            if not points:
                continue
            for at in points[-s.max_catchup:]:
                out.extend(evaluate(client, s, self.book, clock.job, at, live=True, errors=self.errors))
            self.positions[clock.job] = points[-1]
        del self.errors[:-20]
        return out
