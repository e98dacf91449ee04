"""The detector engine: judge a job at every instant of its event-time clock, live or in replay.

`evaluate` runs every detector for one job at one instant (with the job's current run,
`Epoch`) and turns the findings into alert events through the book. `replay` does it at
every grid instant of a job's stored history with a fresh book and publishes nothing.
`LiveCursor` does the same live: each turn it reads the active jobs' clocks (clock.py),
and judges every grid instant between a job's position and the newest instant its
watermark allows, oldest first, so a burst of telemetry (a spool replay, a simulation
faster than real time, catching up after a restart) is judged at exactly the instants a
replay judges, and raises the same alerts. Nothing is skipped:

* a turn judges at most `max_catchup` instants per job, round robin between jobs (one
  instant each in turn), and starts no round that the longest of the last `ROUNDS_KEPT`
  rounds would carry past `turn_budget_s` of wall clock (its first round always runs);
  the rest waits for the next turn, which the service starts at once (`backlog` > 0). One
  job's backlog neither starves the others nor delays publishing, and a catch-up turn lasts
  no longer than its budget unless one round alone does or a round is slower than the recent
  ones (an estimate: a round's cost varies with the detectors due and the jobs queued). A
  turn's own cost (the clocks read, the positions saved) is ~0.1 s at 10,000 GPUs, so a
  backlog judged a round per turn is caught up at nearly the same pace.
* every query of an instant is bounded by time or by the run's recent step range, so an
  instant costs the same at the start of a job and after a week of it.
* a job's position is saved (positions.py) once the turn's alerts are published, so a
  restarted analyzer goes on where it stopped.
* data that arrives for an instant already judged — a late exit or log line, or anything
  once the job has stopped — has the job's last instant judged again (the book publishes
  only what changed).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

from clickhouse_connect.driver.exceptions import OperationalError

from vigil.analyzer.alerts.book import AlertBook
from vigil.analyzer.clock import SPARSE, JobClock, grid, grid_ceil, grid_floor, job_clocks, topic_behind
from vigil.analyzer.detect.base import Detector, EvalContext, Finding, NotYet, SourceClock, Walk, due
from vigil.analyzer.detect.epoch import EpochTracker
from vigil.analyzer.detect.flap import FlapDetector
from vigil.analyzer.detect.hang import HangDetector
from vigil.analyzer.detect.heartbeat import HeartbeatDetector
from vigil.analyzer.detect.logs import ExitDetector, LogDetector
from vigil.analyzer.detect.mfu import MfuDriftDetector
from vigil.analyzer.detect.numeric import NumericDetector
from vigil.analyzer.detect.replicas import ReplicaDetector
from vigil.analyzer.detect.straggler import StragglerDetector
from vigil.analyzer.detect.traffic import TrafficDetector
from vigil.analyzer.positions import PositionStore
from vigil.analyzer.settings import AnalyzerSettings
from vigil.analyzer.shard import Ownership
from vigil.clickhouse.query import QueryClient
from vigil.contract import Alert
from vigil.errors import one_line

log = logging.getLogger(__name__)

DETECTORS: tuple[Detector, ...] = (
    StragglerDetector(), TrafficDetector(), FlapDetector(), MfuDriftDetector(), HeartbeatDetector(), LogDetector(),
    ExitDetector(), HangDetector(), NumericDetector(), ReplicaDetector(),
)
_MS = timedelta(milliseconds=1)


class FindingStage(Protocol):
    """A step between the detectors and the alert book (incidents: link findings, demote victims')."""

    def apply(self, ctx: EvalContext, findings: list[Finding], ran: Sequence[str]) -> list[Finding]: ...


def evaluate(client: QueryClient, settings: AnalyzerSettings, book: AlertBook, job: str, at: datetime, *,
             live: bool = False, detectors: Sequence[Detector] = DETECTORS, errors: list[str] | None = None,
             tracker: EpochTracker | None = None, sources: Mapping[tuple[str, str], SourceClock] | None = None,
             stages: Sequence[FindingStage] = (), walk: Walk | None = None,
             present: frozenset[str] | None = None, frontiers: Mapping[str, datetime] | None = None) -> list[Alert]:
    """Run the detectors for `job` as of `at`; the alert events this instant produces.

    A detector that fails on its own (a bug, a bad row) is left out of this instant and the
    others still run; a store that is down or busy (`OperationalError`) fails the instant,
    so the live cursor judges it again on its next turn instead of judging it half.

    `walk`: the job's state across the instants of this walk (`Walk`): a detector with a
    `cadence_s` runs only when due, its last findings standing in between (before its first
    run in this walk it counts as not run: its alerts neither refresh nor resolve). Without
    a walk (one instant on its own) every detector runs.
    `present`: the sources the job has stored (live: from the clock); a detector skips the
    query of a source the job never sent.
    `frontiers` (live): per topic, the wall time before which everything produced to it is stored; a detector
    whose verdict needs more raises `NotYet` and the instant is not judged (None: replay, all stored).
    """
    tracker = tracker or EpochTracker(job=job, settings=settings.epoch)
    walking = walk is not None  # one instant on its own (no walk): every detector runs, whatever its cadence
    walk = walk if walk is not None else Walk()
    if present is None and sources is not None:
        present = frozenset(src for _h, src in sources)
    ctx = EvalContext(client=client, settings=settings, job=job, at=at, live=live, firing=book.firing_subjects(job),
                      epoch_of=lambda: tracker.at(client, at), sources=sources, state=walk.state, present=present,
                      frontiers=frontiers)
    findings = []
    ran = []
    for d in detectors:
        if walking and not due(d, at, settings.eval_step_s):
            if d.name in walk.carried:
                findings.extend(walk.carried[d.name])
                ran.append(d.name)
            continue
        try:
            found = d.detect(ctx)
            walk.carried[d.name] = found
            findings.extend(found)
            ran.append(d.name)
        except (OperationalError, NotYet):
            raise
        except Exception as exc:  # one broken detector must not silence the others
            msg = f"{d.name} on {job} at {at.isoformat()}: {one_line(exc)}"
            log.warning("detector failed: %s", msg)
            if errors is not None:
                errors.append(msg)
    for stage in stages:
        try:
            findings = stage.apply(ctx, findings, ran)
        except OperationalError:
            raise
        except Exception as exc:  # a broken stage leaves the findings as the detectors made them
            msg = f"{type(stage).__name__} on {job} at {at.isoformat()}: {one_line(exc)}"
            log.warning("finding stage failed: %s", msg)
            if errors is not None:
                errors.append(msg)
    return book.update(job, at, ran, findings)


def replay(client: QueryClient, settings: AnalyzerSettings, job: str, start: datetime | None = None,
           end: datetime | None = None, stages: Sequence[FindingStage] = ()) -> list[Alert]:
    """Alert events the detectors would have raised over `job`'s stored history (every grid instant).

    `stages` as the live service runs them (`IncidentStage`: victims' alerts linked and demoted)
    to compare with it; none: the detectors' findings alone.
    """
    clocks = job_clocks(client, job=job)
    if not clocks:
        raise ValueError(f"no telemetry stored for job {job!r}")
    clock = clocks[0]
    step = settings.eval_step_s
    lo = max(start, clock.first_ts) if start else clock.first_ts
    hi = min(grid_floor(end, step), clock.until(step)) if end else clock.until(step)  # an end past the job's: as none
    book = AlertBook(refresh_s=settings.refresh_s)
    tracker = EpochTracker(job=job, settings=settings.epoch)
    walk = Walk()
    present = frozenset(src for _h, src in clock.sources)
    out: list[Alert] = []
    for at in grid(lo - _MS, hi, step):
        out.extend(evaluate(client, settings, book, job, at, tracker=tracker, stages=stages, walk=walk,
                            present=present))
    return out


ROUNDS_KEPT = 8
"""Rounds whose wall time bounds the next one's estimate: at least one whole cycle of every costly detector's cadence
on the default grid (traffic_stall every 2nd instant, the straggler and nic_flap every 4th, mfu_drift every 5th)."""


@dataclass(kw_only=True)
class LiveCursor:
    """Per-job position of the live evaluation on the event-time clock (see the module docstring)."""

    settings: AnalyzerSettings
    book: AlertBook
    store: PositionStore | None = None
    stages: Sequence[FindingStage] = ()
    owner: Ownership | None = None  # the jobs this shard judges (shard.py); None: every job
    positions: dict[str, datetime] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    backlog: int = 0  # instants known to wait after the last turn
    behind_s: float = 0.0  # event time between the most lagging job's position and its judgeable end, after the turn
    instants_judged: int = 0
    instants_waited: int = 0  # instants a detector found data for still in flight (`NotYet`): judged at a later turn
    _trackers: dict[str, EpochTracker] = field(default_factory=dict)
    _walks: dict[str, Walk] = field(default_factory=dict)
    _judged_wall: dict[str, datetime] = field(default_factory=dict)
    _unsaved: dict[str, datetime] = field(default_factory=dict)
    _unfinished: set[str] = field(default_factory=set)
    _loaded: bool = False
    _owner_seen: int = 0
    _frontiers: Mapping[str, datetime] | None = None  # the turn's topic frontiers (None: not measured)
    clock: Callable[[], float] = time.monotonic  # wall seconds: the turn's budget (tests give a clock of their own)
    _rounds: deque[float] = field(default_factory=lambda: deque(maxlen=ROUNDS_KEPT))  # recent rounds' wall seconds

    def turn(self, client: QueryClient, frontier: datetime | None = None,
             publish: Callable[[list[Alert]], None] | None = None,
             topics: Mapping[str, datetime] | None = None) -> list[Alert]:
        """Judge the pending instants of every active job; the alert events raised (publish, then `commit`).

        `publish`: called with the alerts raised so far after each round that raised any while instants still
        wait (a catch-up: a lost host found at its first instants pages then, not at the end of the turn); what
        it is given is not returned. Positions are saved by `commit` only, after the turn's last alerts are out.
        `topics`: each ingested topic's own frontier (`LagProbe.topic_frontiers`): a dense source whose topic is
        behind holds its job's watermark however far the other topics are ahead, and detectors check them
        (`EvalContext.stored_before`); None: not measured (a test, a replay), every topic taken as caught up.
        """
        s = self.settings
        if not self._loaded and self.store is not None:
            self.positions.update(self.store.load())
            self._unfinished |= set(self.positions)
        self._loaded = True
        if self.owner is not None and self.owner.changed != self._owner_seen:
            self._owner_seen = self.owner.changed
            self._handover()
        fr = frontier or datetime.now(UTC)
        clocks = job_clocks(client, active_since=fr - timedelta(seconds=s.job_idle_s), also=sorted(self._unfinished),
                            frontier=fr, idle_s=s.watermark_idle_s, max_lag_s=s.watermark_max_lag_s,
                            gone_lag_s=s.watermark_gone_lag_s, gone_min_s=s.watermark_gone_min_s,
                            behind=topic_behind(topics, datetime.now(UTC), s.watermark_idle_s))
        if self.owner is not None:
            clocks = [c for c in clocks if self.owner.owns(c.job)]
        self._frontiers = topics
        queues: dict[str, deque[datetime]] = {}
        by_job = {c.job: c for c in clocks}
        for gone in set(self._trackers) - set(by_job):  # inactive jobs: their state is rebuilt if they return
            self._trackers.pop(gone, None)
            self._walks.pop(gone, None)
            self._judged_wall.pop(gone, None)
        self.backlog = 0
        for c in clocks:
            points, more = self._plan(c)
            self.backlog += int(more)
            if points:
                queues[c.job] = deque(points)
            elif c.stopped:
                self._unfinished.discard(c.job)
        out: list[Alert] = []
        deadline = self.clock() + s.turn_budget_s
        rounds = 0
        # at least one round (always progress); another only if a round as long as the longest lately fits
        while queues and (rounds == 0 or self.clock() + max(self._rounds, default=0.0) < deadline):
            rounds += 1
            started = self.clock()
            for job in list(queues):  # round robin: one instant of each job per round
                at = queues[job].popleft()
                try:
                    out.extend(self._judge(client, by_job[job], at))
                except NotYet as wait:  # its data is still in flight: this job waits for the next turn
                    self.instants_waited += 1
                    log.debug("%s at %s waits: %s", job, at.isoformat(), wait)
                    queues[job].clear()  # not backlog: the next turn comes after an interval, not at once
                except Exception as exc:  # the store is down or busy: this job waits for the next turn
                    self.errors.append(f"{job} at {at.isoformat()}: {one_line(exc)}")
                    log.warning("judging %s at %s failed: %s", job, at.isoformat(), one_line(exc))
                    queues[job].clear()
                if not queues[job]:
                    del queues[job]
            self._rounds.append(self.clock() - started)
            if publish is not None and out and queues:
                publish(out)
                out = []
        self.backlog += sum(len(q) for q in queues.values())
        self.behind_s = max((max(0.0, (c.until(s.eval_step_s) - self.positions[c.job]).total_seconds())
                             for c in clocks if c.job in self.positions), default=0.0)
        del self.errors[:-20]
        return out

    def saved(self) -> dict[str, datetime]:
        """The positions saved in the store (what a restarted or a new owner goes on from)."""
        return self.store.load() if self.store is not None else {}

    def owned_jobs(self) -> list[str]:
        """The jobs this cursor holds a position of and owns (any thread: a copy of the keys first)."""
        return sorted(j for j in list(self.positions) if self.owner is None or self.owner.owns(j))

    def _handover(self) -> None:
        """Jobs moved between shards: let go of those lost, go on with each owned one from its saved position.

        Every job restarts as after an analyzer restart (a fresh walk and epoch tracker: live equals replay); a
        gained job starts where its last owner saved it (its book is the caller's to restore, from the topics).
        """
        assert self.owner is not None
        stored = self.store.load() if self.store is not None else {}
        for job in list(self.positions):
            if not self.owner.owns(job):
                self.positions.pop(job)
                self._unsaved.pop(job, None)
        self._unfinished = {j for j in self._unfinished if self.owner.owns(j)}
        for job, pos in stored.items():
            if self.owner.owns(job):
                self.positions[job] = max(pos, self.positions.get(job, pos))
                self._unfinished.add(job)
        self._trackers.clear()
        self._walks.clear()
        self._judged_wall.clear()

    def _plan(self, c: JobClock) -> tuple[list[datetime], bool]:
        """The next instants to judge for `c.job` (at most `max_catchup`), and whether more wait after them."""
        s = self.settings
        until = c.until(s.eval_step_s)
        pos = self.positions.get(c.job)
        if pos is None:  # first seen: from its first event (or live_history_s back), on the grid
            start = max(c.first_ts, until - timedelta(seconds=s.live_history_s))
            points = grid(start - _MS, until, s.eval_step_s, limit=s.max_catchup + 1)
        else:
            points = grid(pos, until, s.eval_step_s, limit=s.max_catchup + 1)
            if not points and self._late(c, pos):
                points = [pos]
        return points[:s.max_catchup], len(points) > s.max_catchup

    def _late(self, c: JobClock, pos: datetime) -> bool:
        """Something stamped at or before `pos` arrived after the job was last judged."""
        judged = self._judged_wall.get(c.job)
        if judged is None:
            return False
        since = judged - timedelta(seconds=1)  # ClickHouse's clock may differ a little from ours
        if c.stopped:
            return c.last_ingested > since
        return any(sc.ingested > since and sc.last_ts <= pos for (_h, src), sc in c.sources.items() if src in SPARSE)

    def _judge(self, client: QueryClient, c: JobClock, at: datetime) -> list[Alert]:
        tracker = self._trackers.get(c.job)
        if tracker is None:
            tracker = self._trackers[c.job] = EpochTracker(job=c.job, settings=self.settings.epoch)
        walk = self._walks.setdefault(c.job, Walk())
        alerts = evaluate(client, self.settings, self.book, c.job, at, live=True, errors=self.errors,
                          tracker=tracker, sources=c.sources, stages=self.stages, walk=walk, frontiers=self._frontiers)
        self.positions[c.job] = self._unsaved[c.job] = at
        self._judged_wall[c.job] = datetime.now(UTC)
        self.instants_judged += 1
        if c.stopped and at >= grid_ceil(c.last_ts, self.settings.eval_step_s):
            self._unfinished.discard(c.job)
        else:
            self._unfinished.add(c.job)
        return alerts

    def commit(self) -> None:
        """Save the positions reached (call once the turn's alerts are published)."""
        if self.store is not None and self._unsaved:
            self.store.save(self._unsaved)
        self._unsaved = {}
