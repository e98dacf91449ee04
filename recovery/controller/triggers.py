"""What starts a recovery: incidents, critical alerts, and rank exits nothing else explained (pure).

* an open `Incident` of a controlled job: its class from category and cause — a
  `collective_hang` is a hang, a `host_fault` or a hardware cause is hardware, a software cause
  is software, network and unknown causes are `policy.other_as`; its culprits, `strong` unless
  the incident's confidence is weak;
* a firing critical `Alert` named in `policy.alert_triggers` (`alert` or `alert:category`,
  e.g. `error_log:xid`): its host is the culprit, strong for hardware log lines. An `error_log` alert that
  quotes its source reads the Xid catalog's action (`catalog_class`): what the hardware reported (kernel, nvml,
  sysfs) and the catalog says takes the GPU out (reset_gpu, cordon, reboot_then_check, investigate) is hardware
  with a strong culprit — no GPU reset is available to the node backends, so the host is cordoned; an
  application Xid (restart_job, severity error suffices) restarts the job without a cordon; `watch` starts
  nothing; a line a training process printed (source process) is a claim and starts nothing by itself;
* a member of the running generation that exited non-zero (or by a signal) and no incident or
  alert explained within `policy.exit_grace_s`: class `policy.exit_as`, the first host that
  exited is the culprit (MegaScale's driver watching its executors' processes). An exit its
  agent attested (a signed member report, verified by the controller's gate) waits only
  `policy.attested_exit_grace_s` (0) and is `prompt`: its case opens without the settle window,
  and the analyzer's verdict refines it while the pause runs (`engine`);
* a failed member whose agent attested a hardware error of its ranks (`Member.fault`, an Xid /
  ECC / NVLink line it classified in this generation): hardware, prompt, its host the strong
  culprit — the Xid decided at the agent's speed, one recovery that cordons (a victim's exit
  that opened a software case first is refined by it while the pause runs).

Triggers older than `policy.max_trigger_age_s`, or past their signed bound (`vigil.signing.freshness`), are history
and never returned; neither is a
trigger some case already took (`ClusterState.merged`). `strongest` merges a job's triggers
that arrive within the settle window into one: the strongest class, every culprit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from vigil.contract import HARDWARE_FAULTS, Alert, Incident, IncidentCategory, Member
from vigil.contract.xid import XidAction, decides, fault_classes
from vigil.recovery.controller.state import ClusterState
from vigil.recovery.settings import PolicyClass, PolicySettings
from vigil.signing.freshness import expired

SDC_CLASS = "sdc"  # a case's class when an SDC incident rolls the job back (never a trigger's: `classify`)
STRENGTH: dict[str, int] = {"software": 0, "hang": 1, SDC_CLASS: 1, "hardware": 2}


@dataclass(frozen=True, kw_only=True)
class Culprit:
    host: str
    strong: bool
    from_exit: bool = False  # named only because its rank exited first: beside a strong culprit, its victim
    rank: int | None = None
    message: str = ""
    gpus: tuple[int, ...] = ()  # the GPUs the fault's record named (kernel / NVML)
    action: str = ""  # the Xid catalog's action for it: `reset_gpu` with gpus is a GPU quarantine (`steps`)


@dataclass(frozen=True, kw_only=True)
class Trigger:
    trigger_id: str
    job_id: str
    cls: PolicyClass
    source: str  # incident | alert | exit
    category: str
    cause: str
    culprits: tuple[Culprit, ...]
    first_sign: datetime
    detected: datetime
    summary: str
    prompt: bool = False  # open its case at once (an attested exit), not after the settle window
    fault_classes: tuple[str, ...] = ()  # the hardware fault's classes (`xid:memory`, `ecc`): what fleet memory counts


def classify(incident: Incident, policy: PolicySettings) -> PolicyClass:
    if incident.category is IncidentCategory.COLLECTIVE_HANG:
        return "hang"
    if incident.category is IncidentCategory.HOST_FAULT or incident.cause == "hardware":
        return "hardware"
    if incident.cause == "software":
        return "software"
    return policy.other_as


def since(m: Member) -> datetime:
    """When the member entered its state (its event time when it did not say)."""
    return m.since or m.ts


def _controlled(state: ClusterState, job_id: str) -> bool:
    job = state.jobs.get(job_id)
    return job is not None and bool(job.members)


def triggers(state: ClusterState, policy: PolicySettings, now: datetime) -> list[Trigger]:
    """Every trigger not yet taken, oldest first."""
    oldest = now - timedelta(seconds=policy.max_trigger_age_s)
    out: list[Trigger] = []
    for inc in state.incidents.values():
        if inc.status != "open" or inc.incident_id in state.merged or inc.detected < oldest or expired(inc, now):
            continue
        if not _controlled(state, inc.job_id):
            continue
        strong = inc.confidence == "strong"
        out.append(Trigger(
            trigger_id=inc.incident_id, job_id=inc.job_id, cls=classify(inc, policy), source="incident",
            category=inc.category, cause=inc.cause, first_sign=inc.first_sign, detected=inc.detected,
            culprits=tuple(Culprit(host=c.host, rank=c.rank, strong=strong, message=c.message[:500])
                           for c in inc.culprits),
            summary=inc.summary, fault_classes=tuple(str(c) for c in inc.evidence.get("fault_classes") or ())))
    for key, alert in state.alerts.items():
        tid = key
        if tid in state.merged or alert.ts < oldest or expired(alert, now):
            continue
        if not _controlled(state, alert.job_id):
            continue
        category = str(alert.evidence.get("category", ""))
        cls = policy.alert_triggers.get(f"{alert.alert}:{category}") or policy.alert_triggers.get(alert.alert)
        if cls is None:
            continue
        cls, strong, restart = catalog_class(alert, cls)
        if cls is None or (alert.severity != "critical" and not restart):
            continue
        host = str(alert.evidence.get("host") or alert.host)
        culprits = () if host in ("*", "") else (
            Culprit(host=host, strong=strong, message=alert.summary[:500], gpus=_gpus(alert.evidence.get("gpus")),
                    action=str(alert.evidence.get("action") or "")),)
        out.append(Trigger(
            trigger_id=tid, job_id=alert.job_id, cls=cls, source="alert", category=alert.alert,
            cause="hardware" if cls == "hardware" else "unknown", culprits=culprits, first_sign=alert.first_seen,
            detected=alert.ts, summary=alert.summary,
            fault_classes=tuple(fault_classes(category, alert.evidence.get("xids") or ()) if cls == "hardware" else ())))
    grace = timedelta(seconds=policy.exit_grace_s)
    for job in state.jobs.values():
        if job.generation == 0 or job.world_started_at is None:
            continue
        tid = f"{job.job_id}/exit/g{job.generation}"
        failed = sorted((m for h, m in job.members.items() if h in job.world and m.state == "exited"
                         and m.generation == job.generation and (m.exit_code or m.signal)
                         and since(m) >= job.world_started_at), key=since)
        out += [t for m in failed if (t := _fault(state, m, oldest, policy)) is not None]
        if not failed or tid in state.merged:
            continue
        first = failed[0]
        wait = timedelta(seconds=policy.attested_exit_grace_s) if first.signature else grace
        if now - since(first) < wait or since(first) < oldest:
            continue
        how = f"signal {first.signal}" if first.signal else f"exit code {first.exit_code}"
        out.append(Trigger(
            trigger_id=tid, job_id=job.job_id, cls=policy.exit_as, source="exit", category="process_exit",
            cause="unknown", culprits=(Culprit(host=first.host, strong=False, from_exit=True,
                                              message=f"exited with {how}"),),
            first_sign=since(first), detected=since(first) + wait, prompt=bool(first.signature),
            summary=f"{first.host} exited with {how} in generation {job.generation}; "
                    f"{len(failed)} of {len(job.world)} hosts exited"
                    + (" (attested by its agent)" if first.signature else "")))
    return sorted(out, key=lambda t: t.detected)


def catalog_class(alert: Alert, cls: PolicyClass) -> tuple[PolicyClass | None, bool, bool]:
    """(class, strong culprit, an application fault to restart) of a triggering alert: an `error_log` alert that
    quotes its source by the Xid catalog's action (see the module's doc); any other as configured."""
    ev = alert.evidence
    category = str(ev.get("category", ""))
    if alert.alert != "error_log" or "source" not in ev:  # not a log line, or from before sources were told apart
        return cls, category in HARDWARE_FAULTS, False
    if not decides(str(ev["source"])):
        return None, False, False  # what a training process printed: a claim, never a decision
    action = ev.get("action")
    if action == XidAction.WATCH.value:
        return None, False, False
    if action == XidAction.RESTART_JOB.value:
        return "software", False, True
    return cls, bool(ev.get("host_fault")), False


def _fault(state: ClusterState, m: Member, oldest: datetime, policy: PolicySettings) -> Trigger | None:
    """A failed member whose agent attested a hardware error of its ranks (`Member.fault`: an Xid line it classified
    in this generation): a hardware trigger at once, its host the strong culprit, when the same line as an alert
    would be one (`policy.alert_triggers`, `error_log:<category>`). An unattested claim is a plain fact and never
    takes a host out."""
    tid = f"{m.job_id}/fault/g{m.generation}/{m.host}"
    if not m.signature or m.fault not in HARDWARE_FAULTS or tid in state.merged or since(m) < oldest \
            or policy.alert_triggers.get(f"error_log:{m.fault}") != "hardware":
        return None
    how = f"signal {m.signal}" if m.signal else f"exit code {m.exit_code}"
    return Trigger(
        trigger_id=tid, job_id=m.job_id, cls="hardware", source="exit", category=str(m.fault), cause="hardware",
        culprits=(Culprit(host=m.host, strong=True, message=m.reason[:500], gpus=tuple(m.fault_gpus),
                          action=m.fault_action.value if m.fault_action is not None else ""),), first_sign=since(m),
        detected=since(m), prompt=True,
        summary=f"{m.host} exited with {how} (attested by its agent): {m.reason[:500]}")


def _merged_gpu_fault(a: Culprit, b: Culprit) -> tuple[tuple[int, ...], str]:
    """Two words on one host's GPUs: every GPU named, one action only where they agree (or one said none)."""
    action = a.action if a.action == b.action or not b.action else b.action if not a.action else ""
    return tuple(sorted({*a.gpus, *b.gpus})), action


def _gpus(value: object) -> tuple[int, ...]:
    """GPU indices an alert's evidence names (the analyzer's `gpus`, nulls and non-indices left out)."""
    if not isinstance(value, list):
        return ()
    return tuple(sorted({g for g in value if type(g) is int and 0 <= g < 64}))[:64]


def strongest(group: Sequence[Trigger]) -> Trigger:
    """One trigger standing for `group` (same job): the strongest class, the union of culprits
    (strong when any said so), the earliest first sign; the id of the first that arrived."""
    first = min(group, key=lambda t: t.detected)
    top = max(group, key=lambda t: (STRENGTH[t.cls], -t.detected.timestamp()))
    culprits: dict[str, Culprit] = {}
    for t in sorted(group, key=lambda t: -STRENGTH[t.cls]):
        for c in t.culprits:
            held = culprits.get(c.host)
            if held is None:
                culprits[c.host] = c
            else:  # the stronger word on the host; named by an exit only if every trigger named it so
                best = c if c.strong and not held.strong else held
                gpus, action = _merged_gpu_fault(c, held)
                culprits[c.host] = replace(best, from_exit=held.from_exit and c.from_exit, gpus=gpus, action=action)
    return Trigger(trigger_id=first.trigger_id, job_id=first.job_id, cls=top.cls, source=top.source,
                   category=top.category, cause=top.cause, culprits=tuple(culprits.values()),
                   first_sign=min(t.first_sign for t in group), detected=first.detected, summary=top.summary,
                   prompt=any(t.prompt for t in group),
                   fault_classes=tuple(sorted({c for t in group for c in t.fault_classes})))
