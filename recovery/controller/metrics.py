"""The recovery controller's Prometheus metrics: cases by outcome, where their time went, what they cost.

An outcome is counted once, by the instance that leads when it folds it, and only an outcome dated
after this process started: the log is folded from its beginning at every start, and history
counted again would read as a burst of recoveries (`increase()` takes a restarted counter's value
as new). A job's start, scale-up and an operator's resume are cases too (`LIFECYCLE` classes),
counted by outcome and class only: the
durations, phases, steps lost and cordons are those of recoveries from a fault. Re-deliveries are
counted once (the outcome's event id, remembered boundedly). Figures the controller keeps
(leading, open cases, events folded, security refusals by kind) are read when scraped.

Goodput: what each recovery that resumed cost its job, by the goodput ledger's categories
(`vigil.contract.ledger.recovery_seconds`, the rule `vigil goodput` and the Goodput page apply: phases,
steps redone, or all of it to a resize or an SDC replay; a job's start costs nothing). The steps redone
are priced at the job's step time as its agents last reported it (`Member.step_ms`, the median of their
recent steps; the ledger's ideal step time needs the step records, which the controller does not read),
nothing where none was reported. The job's ETTR itself is the ledger's (ClickHouse), not a metric here.
`job` is bounded by `max_jobs` (later jobs: `other`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from vigil.contract import Event, Member, Outcome, utcnow
from vigil.contract.ledger import recovery_seconds
from vigil.metrics import Metrics, MetricsSettings
from vigil.metrics.caps import LabelCap
from vigil.metrics.registry import never_raises

LIFECYCLE = ("start", "scale", "resume")
"""Case classes that recover no fault (the engine's own: `Engine._open`'s cls)."""
PHASES = ("detect", "decide", "pause", "diagnose", "restart", "checkpoint_load")
STEPS_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)
MAX_STEP_MS = 3_600_000.0  # a step time the job reports counts at most an hour (it prices steps redone)
REMEMBERED = 10_000
STEADY_STEPS = 10
"""A member's step time is the job's once it covers this many steps (or none was known): the first steps of a
generation (warm-up, the restore) are not its pace."""


class RecoveryMetrics(Metrics):
    def __init__(self, settings: MetricsSettings | None = None, started: datetime | None = None) -> None:
        super().__init__("recovery", settings)
        self.started = started or utcnow()
        self.cases = self.counter("vigil_recovery_cases_total", "recoveries ended, by outcome and class (hardware, "
                                  "software, hang; a job's start, scale-up, resume)", ("outcome", "class"))
        self.duration = self.histogram("vigil_recovery_duration_seconds", "first sign of a fault to the first "
                                       "step after the restart (recoveries that resumed)")
        self.phases = self.histogram("vigil_recovery_phase_seconds", "where a recovery's time went, by phase",
                                     ("phase",))
        self.steps_lost = self.histogram("vigil_recovery_steps_lost", "training steps redone after a recovery "
                                         "(the last step before the fault minus the checkpoint resumed from)",
                                         buckets=STEPS_BUCKETS)
        self.cordoned = self.counter("vigil_recovery_hosts_cordoned_total", "hosts taken out of service by "
                                     "recoveries")
        self.jobs = LabelCap(self.settings.max_jobs)
        self.lost = self.counter("vigil_goodput_lost_seconds_total", "job time recoveries cost, by the goodput "
                                 "ledger's categories (detect ... restore, steps_redone at the agents' step time, "
                                 "elastic_resize, sdc)", ("job", "category"))
        self.declare("vigil_recovery_leading", "gauge", "1 while this instance holds the controller lease")
        self.declare("vigil_recovery_open_cases", "gauge", "recoveries under way")
        self.declare("vigil_recovery_events_total", "counter", "events folded into the controller's state")
        self.declare("vigil_recovery_stale_members_total", "counter", "member reports folded after a newer one of "
                     "their host (a replay, or a late copy): counted, never kept")
        self.declare("vigil_security_refusals_total", "counter", "decisions and claims refused (unsigned, wrong "
                     "signer, deposed leader, forged checkpoint ...), by what and why", ("what", "problem"))
        self._counted: OrderedDict[str, None] = OrderedDict()
        self._step_ms: OrderedDict[str, float] = OrderedDict()  # job -> its step time (ms), as last reported
        self.source: Any = None  # the RecoveryService, read when scraped
        self.sampled(self._sample)

    @never_raises
    def folded(self, events: Iterable[Event], leading: bool, class_of: Callable[[str], str]) -> None:
        """Events just folded: count the outcomes among them (see the module docstring); `class_of`: a case's
        class by its id ("" when unknown)."""
        for o in events:
            if isinstance(o, Member):
                self._paced(o)
            if not isinstance(o, Outcome) or not leading or o.ts < self.started or o.event_id in self._counted:
                continue
            self._counted[o.event_id] = None
            if len(self._counted) > REMEMBERED:
                self._counted.popitem(last=False)
            cls = class_of(o.incident_id) or "unknown"
            self.cases.labels(o.result, cls).inc()
            if o.resumed_at is not None and "start" not in (cls, o.category):
                self._cost(o)
            if cls in LIFECYCLE:  # no fault, nothing recovered
                continue
            if o.total_s is not None:
                self.duration.observe(o.total_s)
            for phase in PHASES:
                if (s := getattr(o, f"{phase}_s")) is not None:
                    self.phases.labels(phase=phase).observe(s)
            if o.steps_lost is not None:
                self.steps_lost.observe(o.steps_lost)
            if o.cordoned:
                self.cordoned.inc(len(o.cordoned))

    def _paced(self, m: Member) -> None:
        if m.step_ms is None or (m.steps < STEADY_STEPS and m.job_id in self._step_ms):
            return
        self._step_ms[m.job_id] = min(m.step_ms, MAX_STEP_MS)  # the job's own claim: bounded
        self._step_ms.move_to_end(m.job_id)
        if len(self._step_ms) > REMEMBERED:
            self._step_ms.popitem(last=False)

    def _cost(self, o: Outcome) -> None:
        """Count what a resumed recovery cost its job (the ledger's split; steps redone at the job's step time)."""
        step_ms = self._step_ms.get(o.job_id)
        costs = recovery_seconds(o.model_dump(), step_ms or 0.0)
        if step_ms is None:
            costs.pop("steps_redone", None)
        job = self.jobs(o.job_id)
        for category, s in costs.items():
            if s > 0:
                self.lost.labels(job=job, category=category).inc(s)

    def _sample(self) -> Iterable[Metric]:
        svc = self.source
        if svc is None:
            return
        yield GaugeMetricFamily("vigil_recovery_leading", self.described("vigil_recovery_leading"),
                                value=int(bool(svc.lease and svc.lease.leading)))
        yield GaugeMetricFamily("vigil_recovery_open_cases", self.described("vigil_recovery_open_cases"),
                                value=sum(1 for c in list(svc.state.cases.values()) if c.open))
        yield CounterMetricFamily("vigil_recovery_events_total", self.described("vigil_recovery_events_total"),
                                  value=svc.state.applied)
        yield CounterMetricFamily("vigil_recovery_stale_members_total",
                                  self.described("vigil_recovery_stale_members_total"), value=svc.state.stale_members)
        refused = CounterMetricFamily("vigil_security_refusals_total",
                                      self.described("vigil_security_refusals_total"), labels=["what", "problem"])
        for (what, problem), n in sorted(dict(svc.gate.refusals.kinds).items()):
            refused.add_metric([what, problem], n)
        yield refused
