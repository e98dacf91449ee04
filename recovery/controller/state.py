"""The controller's state: a fold of the log, the same live and after a crash.

Everything the controller knows comes from events: incidents and alerts (triggers), the
`recovery` topic (its own decisions and steps, agents' acknowledgements and `member` reports,
`diagnostic` results, checkpoints, outcomes, the resource advisor's `advice`) and the `commands` topic (what it asked).
What reaches `apply()` passed the gate (`vigil.signing.policy`: the audit of every kind is README's
"Threat model"): members, acks and results attested by their own host's agent, case state only from
the controller's signed steps and outcomes; acks and results are held per (command, host) and read only
for the host a command went to, and only an attested checkpoint of a host of the job counts as progress.
`apply()` is idempotent (by `event_id`; member reports, most of the log, by their fold alone, so
keep-alives do not accumulate ids) and does not depend on the order of partitions: a
step's status is its most advanced one (planned < started < ended), a member's state its
newest report by the report's own attested time (`ts`, signed by its host's agent; the gate admits no
unattested member): a genuine older report re-published later (a replay) or a late copy never overwrites
a newer one, it is counted (`stale_members`) and dropped (a held report dated ahead of the fold's clock outranks
no report up to that clock). A member's `ts` and `since` dated more than `MEMBER_SKEW` past
the folding clock are clamped to it, so a report dated ahead neither looks alive for hours
nor outranks later ones. So a controller killed at any point and started again folds the same state,
sees which steps started and did not end, and finishes them instead of repeating them.

The state is bounded: every `COMPACT_EVERY` events folded, `compaction.forget` drops finished
recoveries, old triggers and quiet jobs that no open recovery can need (see that module), and
`_seen` keeps only the newest ids; every fold a duplicate could reach again is idempotent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from vigil.contract import (
    Advice,
    Alert,
    Checkpoint,
    Command,
    Diagnostic,
    Event,
    Incident,
    Member,
    Outcome,
    RecoveryAction,
    is_operator_request,
    utcnow,
)
from vigil.contract.latest import supersedes
from vigil.recovery.controller.compaction import COMPACT_EVERY, SEEN, TOMBSTONES, Retention, forget

INPUT_TOPICS = ("incidents", "alerts", "recovery", "commands")
"""The topics the state is a fold of."""
_RANK = {"planned": 0, "started": 1, "succeeded": 2, "failed": 2, "skipped": 2}
ENDED = ("succeeded", "failed", "skipped")
MEMBER_SKEW = timedelta(minutes=5)  # how far ahead of the folding clock a member's own times may be
RESTORED = 64  # a job's latest `restored` checkpoint reports kept (goodput looks at the recent ones)


def clamp_member(e: Member, now: datetime) -> Member:
    """`e` with `ts` and `since` no later than `now + MEMBER_SKEW` (a producer's clock is a claim)."""
    latest = now + MEMBER_SKEW
    update = {f: latest for f in ("ts", "since") if (v := getattr(e, f)) is not None and v > latest}
    return e.model_copy(update=update) if update else e


@dataclass(kw_only=True)
class Step:
    """One (action, target) of a case, as far as the log says."""

    action: str
    target: str
    status: str = "planned"
    planned_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    started_details: dict[str, Any] = field(default_factory=dict)
    dry_run: bool = False

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    def seconds(self) -> float | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return max(0.0, (self.ended_at - self.started_at).total_seconds())


@dataclass(kw_only=True)
class Case:
    """The recovery of one incident (or a job's start or scale-up): its plan, steps and outcome."""

    case_id: str
    job_id: str
    opened_at: datetime | None = None  # the plan event
    plan: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)  # the plan's: class, trigger, culprits, mode
    skipped: str = ""  # the plan was skipped: why
    steps: dict[tuple[str, str], Step] = field(default_factory=dict)
    outcome: Outcome | None = None
    approved_at: datetime | None = None
    last_ts: datetime | None = None  # the newest event of the case (what forgetting measures)

    @property
    def cls(self) -> str:
        return str(self.details.get("class", ""))

    @property
    def open(self) -> bool:
        return self.opened_at is not None and not self.skipped and self.outcome is None

    @property
    def dry_run(self) -> bool:
        return bool(self.details.get("dry_run"))

    def step(self, action: str, target: str) -> Step | None:
        return self.steps.get((action, target))


@dataclass(kw_only=True)
class Job:
    job_id: str
    members: dict[str, Member] = field(default_factory=dict)
    first_seen: datetime | None = None
    generation: int = 0
    world: list[str] = field(default_factory=list)
    world_started_at: datetime | None = None
    first_started_at: datetime | None = None  # generation 1
    committed: Checkpoint | None = None  # latest committed checkpoint
    restored: list[Checkpoint] = field(default_factory=list)
    cases: list[str] = field(default_factory=list)  # in plan order
    finished: RecoveryAction | None = None  # the controller recorded this run finished (`new_run` starts another)
    last_ts: datetime | None = None  # the newest event of the job (what forgetting measures)
    advice: Advice | None = None  # the resource advisor's latest advice (cited by scale decisions)


@dataclass(kw_only=True)
class ClusterState:
    jobs: dict[str, Job] = field(default_factory=dict)
    cases: dict[str, Case] = field(default_factory=dict)
    incidents: dict[str, Incident] = field(default_factory=dict)
    alerts: dict[str, Alert] = field(default_factory=dict)  # (fingerprint@first_seen) -> first firing event
    commands: dict[str, Command] = field(default_factory=dict)
    acks: dict[tuple[str, str], RecoveryAction] = field(default_factory=dict)  # (command_id, host) -> newest ack
    checks: dict[tuple[str, str], Diagnostic] = field(default_factory=dict)  # (command_id, host) -> `check` result
    cordons: dict[str, RecoveryAction] = field(default_factory=dict)  # event id -> cordon the controller made
    merged: dict[str, str] = field(default_factory=dict)  # trigger id -> the case that took it
    requests: dict[str, RecoveryAction] = field(default_factory=dict)  # operator requests (command_id -> planned)
    requests_done: set[str] = field(default_factory=set)  # operator requests with a result
    executed: dict[str, datetime] = field(default_factory=dict)  # forgotten done requests: id -> time (compaction)
    applied: int = 0
    stale_members: int = 0  # member reports older than the one held for their host (`_member`)
    clock: Callable[[], datetime] = utcnow  # what member times are clamped against
    retention: Retention = field(default_factory=Retention)
    forgotten: dict[str, datetime] = field(default_factory=dict)  # tombstones: case id -> its last event time
    alerts_horizon: datetime | None = None  # alert episodes that began before it were forgotten
    latest: datetime | None = None  # the newest event time folded (log time)
    _seen: dict[str, None] = field(default_factory=dict)  # the newest event ids, in fold order
    _folded: int = 0  # events folded since the last compaction

    @property
    def remembered(self) -> int:
        """How many event ids the fold remembers to drop their duplicates (at most `SEEN`)."""
        return len(self._seen)

    def job(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            job = self.jobs[job_id] = Job(job_id=job_id)
        return job

    def case(self, case_id: str, job_id: str) -> Case:
        case = self.cases.get(case_id)
        if case is None:
            case = self.cases[case_id] = Case(case_id=case_id, job_id=job_id)
        return case

    def tombstone(self, case_id: str, last: datetime) -> None:
        self.forgotten[case_id] = last
        if len(self.forgotten) > TOMBSTONES:
            del self.forgotten[next(iter(self.forgotten))]

    def compact(self, now: datetime | None = None) -> int:
        """Forget what no open recovery can need (`compaction.forget`), as of `now` (default: log time)."""
        self._folded = 0
        if now is None:
            if self.latest is None:
                return 0
            now = min(self.latest, self.clock())
        return forget(self, now, self.retention)

    def _forgotten(self, e: Event) -> bool:
        """`e` belongs to a recovery that was forgotten (a late copy of one of its events)."""
        case_event = isinstance(e, Outcome | Command) or (
            isinstance(e, RecoveryAction) and not e.actor.startswith("agent:") and not is_operator_request(e))
        cid = str(getattr(e, "incident_id", "")) if case_event else ""
        last = self.forgotten.get(cid) if cid else None
        return last is not None and e.ts <= last and cid not in self.cases

    def apply(self, events: Iterable[Event]) -> None:
        for e in events:
            self._folded += 1
            if self._folded >= COMPACT_EVERY:
                self.compact()
            if isinstance(e, Member):  # folding a member is idempotent: keep-alives leave no trace in `_seen`
                self.applied += 1
                self._member(e)
                continue
            if e.event_id in self._seen or self._forgotten(e):
                continue
            self._seen[e.event_id] = None
            if len(self._seen) > SEEN:
                del self._seen[next(iter(self._seen))]
            self.applied += 1
            self.latest = e.ts if self.latest is None else max(self.latest, e.ts)
            if (job := self.jobs.get(e.job_id)) is not None:
                job.last_ts = e.ts if job.last_ts is None else max(job.last_ts, e.ts)
            if isinstance(e, RecoveryAction):
                self._action(e)
            elif isinstance(e, Incident):
                held = self.incidents.get(e.incident_id)
                if supersedes(e, held):
                    self.incidents[e.incident_id] = e
            elif isinstance(e, Alert):
                if e.status == "firing" and (self.alerts_horizon is None or e.first_seen >= self.alerts_horizon):
                    self.alerts.setdefault(alert_key(e), e)
            elif isinstance(e, Command):
                self.commands[e.command_id] = e
            elif isinstance(e, Diagnostic):
                if e.test == "check" and e.command_id:
                    self.checks[(e.command_id, e.host)] = e
            elif isinstance(e, Checkpoint):
                self._checkpoint(e)
            elif isinstance(e, Outcome):
                case = self.case(e.incident_id, e.job_id)
                case.outcome = e
                case.last_ts = e.ts if case.last_ts is None else max(case.last_ts, e.ts)
            elif isinstance(e, Advice):
                job = self.job(e.job_id)
                if job.advice is None or e.ts >= job.advice.ts:
                    job.advice = e

    def _member(self, e: Member) -> None:
        job = self.job(e.job_id)
        e = clamp_member(e, self.clock())
        held = job.members.get(e.host)
        # older than the held report (equal times: the log's order); a held one dated ahead of the fold's clock
        # outranks nothing later than that clock (it would hold off its host's real reports)
        if held is not None and e.ts < min(held.ts, self.clock()):
            self.stale_members += 1  # an older report of this host (a replay, a late copy): the newest one stays
            return
        job.members[e.host] = e
        if job.first_seen is None or e.ts < job.first_seen or (
                new_run(job, e) and job.finished is not None and job.first_seen <= job.finished.ts):
            job.first_seen = e.ts
        job.last_ts = e.ts if job.last_ts is None else max(job.last_ts, e.ts)
        self.latest = e.ts if self.latest is None else max(self.latest, e.ts)

    def ack(self, command_id: str, host: str) -> RecoveryAction | None:
        """The newest acknowledgement of `command_id` by `host`, the host it was sent to (an ack attested by
        another host's agent is its own word about a command it never got, and never answers this one)."""
        return self.acks.get((command_id, host))

    def check_of(self, command_id: str, host: str) -> Diagnostic | None:
        """The diagnostic round's result of `command_id`, from `host` it was sent to."""
        return self.checks.get((command_id, host))

    def _checkpoint(self, e: Checkpoint) -> None:
        job = self.job(e.job_id)
        ours = bool(e.signature) and (e.host in job.world or e.host in job.members)  # attested by the rank's host
        if e.phase == "committed" and ours and (job.committed is None or e.ts >= job.committed.ts):
            job.committed = e
        elif e.phase == "restored" and all(r.event_id != e.event_id for r in job.restored):
            job.restored = [*job.restored, e][-RESTORED:]

    def pending_requests(self) -> list[RecoveryAction]:
        """Operator requests (the dashboard's cordon / uncordon / evict) not executed yet, oldest first."""
        return sorted((r for cid, r in self.requests.items() if cid not in self.requests_done), key=lambda r: r.ts)

    def _action(self, e: RecoveryAction) -> None:
        if is_operator_request(e):
            if e.command_id in self.executed:  # done and forgotten: a re-published copy is never pending again
                return
            if e.status == "planned":
                self.requests.setdefault(e.command_id, e)
            elif e.status in ENDED:
                self.requests_done.add(e.command_id)
            return
        if e.actor.startswith("agent:") and e.command_id:
            held = self.acks.get((e.command_id, e.host))
            if held is None or _RANK[e.status] > _RANK[held.status] or (
                    _RANK[e.status] == _RANK[held.status] and e.ts >= held.ts):
                self.acks[(e.command_id, e.host)] = e
            return
        if e.action == "cordon" and e.status == "succeeded" and e.actor == "controller" and e.details.get("changed"):
            self.cordons[e.event_id] = e
        if e.action == "finish" and e.status == "succeeded" and e.actor == "controller":
            job = self.job(e.job_id)  # it ends the run it names: a replayed older one ends no later run
            gen, held = e.generation or 0, job.finished
            if gen >= job.generation and (held is None or gen > (held.generation or 0) or e.ts < held.ts):
                job.finished = e
            return
        if not e.incident_id:
            return
        case = self.case(e.incident_id, e.job_id)
        case.last_ts = e.ts if case.last_ts is None else max(case.last_ts, e.ts)
        if e.action == "plan":
            if e.status == "skipped":
                case.skipped = e.reason or "skipped"
            elif case.opened_at is not None and e.details.get("refined_by"):  # a refinement (engine._refine)
                case.plan = [str(s) for s in e.details.get("steps", case.plan)]
                case.details = dict(e.details)
                for merged in e.details.get("merged", []):
                    self.merged[str(merged)] = e.incident_id
            elif case.opened_at is None or e.ts < case.opened_at:
                case.opened_at = e.ts
                case.plan = [str(s) for s in e.details.get("steps", [])]
                case.details = dict(e.details)
                job = self.job(e.job_id)
                if e.incident_id not in job.cases:
                    job.cases.append(e.incident_id)
                for merged in e.details.get("merged", []):
                    self.merged[str(merged)] = e.incident_id
            self.merged[e.incident_id] = e.incident_id
            return
        if e.action == "approve" and e.status == "succeeded":
            case.approved_at = e.ts if case.approved_at is None else max(case.approved_at, e.ts)
        if e.action == "replay":  # the replay's own incidents are its evidence, never a recovery of their own
            for merged in e.details.get("merged", []):
                self.merged[str(merged)] = e.incident_id
        step = case.steps.get((e.action, e.target))
        if step is None:
            step = case.steps[(e.action, e.target)] = Step(action=e.action, target=e.target)
        if e.status == "planned":
            step.planned_at = step.planned_at or e.ts
            step.dry_run = step.dry_run or e.dry_run
        if e.status == "started":
            step.started_at = e.ts if step.started_at is None else min(step.started_at, e.ts)
            step.started_details = {**e.details, **step.started_details}
        if _RANK[e.status] > _RANK[step.status] or (e.status in ENDED and step.ended_at is not None
                                                    and e.ts > step.ended_at):
            step.status = e.status
            if e.status in ENDED:
                step.ended_at, step.reason, step.details = e.ts, e.reason, dict(e.details)
                step.started_at = step.started_at or e.started_at
        if e.action in ("start", "restart") and e.status == "started" and e.generation:
            job = self.job(e.job_id)
            if e.generation > job.generation:
                job.generation = e.generation
                job.world = [str(h) for h in e.details.get("hosts", [])]
                job.world_started_at = e.ts
                if job.finished is not None and (job.finished.generation or 0) < e.generation:
                    job.finished = None  # a new run of a reused job id
            if e.generation == 1 or job.first_started_at is None:
                job.first_started_at = e.ts if job.first_started_at is None else min(job.first_started_at, e.ts)


def new_run(job: Job, m: Member) -> bool:
    """`m` is an agent of a new run of a finished job (its id reused): it waits in no generation, since after the
    finish (the finished run's agents leave and never wait again)."""
    done = job.finished
    return done is not None and m.state == "waiting" and m.generation == 0 and (m.since or m.ts) > done.ts


def alert_key(a: Alert) -> str:
    """One firing episode of an alert: its fingerprint and when it started."""
    return f"{a.fingerprint}@{a.first_seen:%Y%m%dT%H%M%S}"
