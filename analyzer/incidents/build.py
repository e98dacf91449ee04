"""The incidents one evaluation instant's findings amount to: culprit, victims, cause, linked alerts.

Three shapes of failure, from the detectors' findings at the instant (nothing is remembered here), and the numerical
incidents of `incidents.numeric` (silent_data_corruption, numeric_fault: one named rank each):

* collective_hang: a `collective_hang` finding names the culprits and victims (Flight
  Recorder, else weaker evidence); the later exits of those ranks (the victims' timeouts,
  the culprit's teardown) are its consequences, not a new incident.
* crash_cascade: rank failures (`process_exit` findings) within `window_s` of each other.
  The culprit is the earliest rank whose own error is not a peer's (`errors.kind_of`), by
  when it printed that error (a rank that raised first may exit last). A cascade of peer
  errors only waits `settle_s` for its culprit's exit to arrive (its findings are held back
  meanwhile, so victims never page first); then timeouts plus silently torn-down ranks read
  as a collective hang, a host that stopped reporting is the culprit, else the first
  failure is named on weak evidence.
* host_fault: a crash cascade whose culprit's host showed hardware errors (Xid, ECC, NVLink
  lines the hardware reported and whose catalog action takes the host out: `errors.host_fault`) within
  `hardware_window_s` before its failure. A rank's own message that names hardware is a claim: kept as
  evidence (`claims_hardware`), never the cause (issue 49).

`error_log` findings join the incident whose host and ranks they are about, from its first
sign on; the culprit's own lines are its evidence, the others are victims'. A hardware
line no incident claims yet is held back for `hardware_settle_s` (Alertmanager's group_wait):
the crash it causes follows within seconds, and then one incident pages, not two; shorter
than `settle_s`, as hardware is a hard fault to page fast. Pure logic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from vigil.analyzer.detect.base import Finding, as_utc
from vigil.analyzer.incidents.draft import Draft, Party
from vigil.analyzer.incidents.errors import (
    Cause,
    cause_of,
    claims_hardware,
    hardware_classes,
    host_fault,
    is_timeout,
    kind_of,
)
from vigil.analyzer.incidents.numeric import drafts as numeric_drafts
from vigil.analyzer.settings import IncidentSettings
from vigil.contract import IncidentCategory

SLACK = timedelta(seconds=5)


@dataclass(frozen=True, kw_only=True)
class Failure:
    finding: Finding
    host: str
    rank: int | None
    message: str
    at: datetime  # when its own error was printed, else when it was seen gone
    kind: str

    @property
    def party(self) -> Party:
        return Party(host=self.host, rank=self.rank, message=self.message, at=self.at)


@dataclass(frozen=True, kw_only=True)
class Built:
    drafts: list[Draft]
    held: list[Finding]  # findings of cascades still waiting for their culprit: not published yet


def _failure(f: Finding) -> Failure:
    ev = f.evidence
    at = as_utc(ev["failed_at"]) if ev.get("failed_at") else f.since
    message = str(ev.get("summary") or "")
    return Failure(finding=f, host=f.host, rank=ev.get("rank"), message=message, at=at,
                   kind=kind_of(message, ev.get("signal")))


def _party(d: Mapping[str, Any]) -> Party:
    rank = d.get("rank")
    return Party(host=str(d.get("host", "")), rank=int(rank) if rank is not None else None,
                 message=str(d.get("message", "")))


def _hardware(logs: Sequence[Finding], host: str, lo: datetime, hi: datetime) -> list[Finding]:
    out = []
    for f in logs:
        ev = f.evidence
        if f.host == host and host_fault(ev):
            first = as_utc(ev["first_line"]) if ev.get("first_line") else f.since
            if lo <= first <= hi:
                out.append(f)
    return out


def _hang(h: Finding, failures: list[Failure], logs: Sequence[Finding], s: IncidentSettings) -> Draft:
    ev = h.evidence
    culprits = [_party(c) for c in ev.get("culprits", [])]
    victims = [_party(v) for v in ev.get("victims", [])]
    named = {p.key for p in culprits + victims}
    ranks = {p.rank for p in culprits + victims}
    claimed = [x for x in failures if x.at >= h.since - SLACK and ((x.host, x.rank) in named or x.rank in ranks
                                                                  or not named)]
    if not culprits:  # the stall named nobody: the exits may (timeouts + silently torn-down ranks)
        culprits = _silent(claimed)
        victims = [x.party for x in claimed if x.party.key not in {c.key for c in culprits}]
    culprit_keys = {c.key for c in culprits}
    hardware = [f for c in culprits for f in _hardware(logs, c.host, h.since - timedelta(seconds=s.hardware_window_s),
                                                      h.since + SLACK)]
    draft = Draft(category=IncidentCategory.COLLECTIVE_HANG, cause="hardware" if hardware else "unknown", culprits=culprits,
                  victims=victims, strong=ev.get("confidence") == "strong", first_sign=h.since,
                  last_sign=max([h.since, *(x.at for x in claimed)]), summary=h.summary, culprit_findings=[h, *hardware],
                  evidence={"flight_recorder": {k: ev[k] for k in ("verdict", "frontiers", "wait_for", "dumps",
                                                                    "expected", "first_dump") if k in ev},
                            "fault_classes": hardware_classes(hardware)})
    for x in claimed:
        (draft.culprit_findings if x.party.key in culprit_keys else draft.victim_findings).append(x.finding)
    for x in claimed:
        failures.remove(x)
    return draft


def _silent(failures: Sequence[Failure]) -> list[Party]:
    """Ranks torn down without an error of their own while the others timed out: the hang suspects."""
    if not any(x.kind == "peer" and is_timeout(x.message) for x in failures):
        return []
    return [x.party for x in failures if x.kind == "teardown"]


def _cascades(failures: Sequence[Failure], window: timedelta) -> list[list[Failure]]:
    out: list[list[Failure]] = []
    for x in sorted(failures, key=lambda x: (x.at, x.host, x.rank if x.rank is not None else -1)):
        if out and x.at - out[-1][0].at <= window:
            out[-1].append(x)
        else:
            out.append([x])
    return out


def _crash(cascade: list[Failure], lost_hosts: Sequence[Finding], logs: Sequence[Finding], at: datetime,
           s: IncidentSettings) -> Draft | None:
    start, end = cascade[0].at, cascade[-1].at
    own = [x for x in cascade if x.kind == "own"]
    category, strong = IncidentCategory.CRASH_CASCADE, True
    culprit_findings: list[Finding] = []
    if own:
        culprits = [own[0].party]
    elif (at - start).total_seconds() < s.settle_s:
        return None  # only peers' errors so far: the culprit's exit may still be on its way
    elif lost := [f for f in lost_hosts if f.since <= end + SLACK]:
        culprits = [Party(host=lost[0].host, rank=None, message=lost[0].summary, at=lost[0].since)]
        culprit_findings, strong = [lost[0]], False
    elif silent := _silent(cascade):
        culprits, category, strong = silent, IncidentCategory.COLLECTIVE_HANG, False
    else:
        culprits, strong = [cascade[0].party], False
    head = culprits[0]
    hardware = _hardware(logs, head.host, (head.at or start) - timedelta(seconds=s.hardware_window_s),
                         (head.at or start) + SLACK)
    # a weak culprit's message is a peer's error: it says nothing of the cause
    cause: Cause = cause_of(head.message, hardware_lines=bool(hardware)) if strong else \
        "hardware" if hardware else "unknown"
    claimed = strong and not hardware and claims_hardware(head.message)
    if category == IncidentCategory.CRASH_CASCADE and cause == "hardware":
        category = IncidentCategory.HOST_FAULT
    keys = {c.key for c in culprits}
    victims = [x.party for x in cascade if x.party.key not in keys]
    first_sign = min([head.at or start, *(f.since for f in hardware)])
    who = f"{head.host} rank {head.rank}" if head.rank is not None else f"host {head.host}"
    what = f" ({head.message[:200]})" if head.message else ""
    if category == IncidentCategory.COLLECTIVE_HANG:
        names = ", ".join(f"{c.host} rank {c.rank}" for c in culprits)
        summary = (f"collective hang (weak evidence, no Flight Recorder culprit): {names} torn down without an error "
                   f"while {len(victims)} ranks timed out waiting")
    elif category == IncidentCategory.HOST_FAULT:
        summary = f"host fault on {head.host}: {who} failed first{what}; {len(victims)} ranks failed after it"
    else:
        weak = "" if strong else " (weak evidence: every error was a peer's)"
        claim = " (its message claims a hardware fault the host did not report)" if claimed else ""
        summary = f"{who} failed first{what}; {len(victims)} ranks failed after it{weak}{claim}"
    draft = Draft(category=category, cause=cause, culprits=culprits, victims=victims, strong=strong,
                  first_sign=first_sign, last_sign=end, summary=summary[:2048],
                  culprit_findings=[*culprit_findings, *hardware],
                  evidence={"failures": [{"host": x.host, "rank": x.rank, "at": x.at.isoformat(), "kind": x.kind,
                                          "message": x.message[:500]} for x in cascade],
                            "hardware_lines": [f.summary[:300] for f in hardware],
                            "fault_classes": hardware_classes(hardware), "claims_hardware": claimed})
    for x in cascade:
        (draft.culprit_findings if x.party.key in keys else draft.victim_findings).append(x.finding)
    return draft


def _link_logs(drafts: Sequence[Draft], logs: Sequence[Finding]) -> None:
    taken = {id(f) for d in drafts for f in d.culprit_findings + d.victim_findings}
    for f in logs:
        if id(f) in taken:
            continue
        ev = f.evidence
        first = as_utc(ev["first_line"]) if ev.get("first_line") else f.since
        ranks = {int(r) for r in ev.get("ranks", [])}
        for d in drafts:
            on_host = {p.rank for p in d.culprits + d.victims if p.host == f.host}
            if not on_host or first < d.first_sign - SLACK or first > d.last_sign + SLACK:
                continue
            if ranks and not ranks <= on_host and None not in on_host:
                continue
            culprit_ranks = {c.rank for c in d.culprits if c.host == f.host}
            mine = bool(culprit_ranks) and (not ranks or bool(ranks & culprit_ranks) or None in culprit_ranks)
            (d.culprit_findings if mine else d.victim_findings).append(f)
            break


def build(findings: Sequence[Finding], at: datetime, s: IncidentSettings) -> Built:
    """The incident drafts of one instant, and the findings to hold back for now."""
    logs = [f for f in findings if f.alert == "error_log"]
    lost = [f for f in findings if f.alert == "heartbeat_loss"]
    failures = [_failure(f) for f in findings if f.alert == "process_exit"]
    drafts = [_hang(h, failures, logs, s) for h in sorted((f for f in findings if f.alert == "collective_hang"),
                                                          key=lambda f: (f.since, f.subject))]
    held: list[Finding] = []
    for cascade in _cascades(failures, timedelta(seconds=s.window_s)):
        draft = _crash(cascade, lost, logs, at, s)
        if draft is None:
            held += [x.finding for x in cascade]
        else:
            drafts.append(draft)
    drafts += numeric_drafts(findings)
    _link_logs(drafts, logs)
    linked = {id(f) for d in drafts for f in d.culprit_findings + d.victim_findings}
    for f in logs:  # a hardware line waits a moment for the crash it may cause, so one incident pages, not two
        first = as_utc(f.evidence["first_line"]) if f.evidence.get("first_line") else f.since
        if host_fault(f.evidence) and id(f) not in linked and \
                (at - first).total_seconds() < s.hardware_settle_s:
            held.append(f)
    return Built(drafts=drafts, held=held)
