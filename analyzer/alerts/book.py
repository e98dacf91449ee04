"""The alert book: findings at an instant -> Alert events with a lifecycle.

One fingerprint `job/alert/subject` is one incident (two findings of one fingerprint at an
instant, e.g. a NIC's drop and its flaps: the most severe stands). A new finding publishes
`firing` (first_seen = when the condition started holding); while it keeps holding,
the alert is re-published only when its severity or its incident (evidence `incident_id`)
changes or `refresh_s` of event time has passed; when a detector that ran no longer finds it, `resolved` is
published. Event ids are derived from (fingerprint, status, ts), so re-publishing
after a crash is recognisable as the same event. The book is rebuilt from the alerts
topic at start (`restore`), so a restarted analyzer does not fire twice.

Restored with `until` (each job's saved position), the book is the one of that position: an event stamped after
its job's position was published by a turn whose positions were never saved (an analyzer or a shard killed
mid-catch-up). Those instants are judged again; the events they yield are the same (same ids) and are applied
without being published twice, instead of a book ahead of the cursor resolving and re-firing what it already
published.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from vigil.analyzer.detect.base import Finding
from vigil.contract import Alert
from vigil.contract.latest import supersedes
from vigil.contract.severity import rank


def fingerprint(job: str, alert: str, subject: str) -> str:
    return f"{job}/{alert}/{subject}"




def _one_per_fingerprint(job: str, findings: Iterable[Finding]) -> list[Finding]:
    """Two detectors may find the same subject (a NIC's drop and its flaps): the most severe finding stands, the
    first one of equal severity."""
    best: dict[str, Finding] = {}
    for f in findings:
        fp = fingerprint(job, f.alert, f.subject)
        held = best.get(fp)
        if held is None or rank(f.severity) > rank(held.severity):
            best[fp] = f
    return list(best.values())


def _event_id(fp: str, status: str, ts: datetime) -> str:
    return hashlib.sha1(f"{fp}|{status}|{ts.isoformat()}".encode()).hexdigest()[:32]


@dataclass(kw_only=True)
class AlertBook:
    refresh_s: float = 60.0
    current: dict[str, Alert] = field(default_factory=dict)
    ahead: set[str] = field(default_factory=set)  # ids published past their job's saved position: not sent again

    def restore(self, alerts: Iterable[Alert], until: Mapping[str, datetime] | None = None) -> None:
        """Rebuild from the topic; with `until`, as of each listed job's saved position (later ids kept aside)."""
        for a in alerts:
            pos = until.get(a.job_id) if until is not None else None
            if pos is not None and a.ts > pos:
                self.ahead.add(a.event_id)
                continue
            held = self.current.get(a.fingerprint)
            if supersedes(a, held):
                self.current[a.fingerprint] = a

    def firing(self, job: str | None = None) -> list[Alert]:
        return [a for a in self.current.values() if a.status == "firing" and (job is None or a.job_id == job)]

    def firing_subjects(self, job: str) -> frozenset[str]:
        return frozenset(f"{a.alert}:{a.subject}" for a in self.firing(job))

    def update(self, job: str, at: datetime, ran: Iterable[str], findings: Iterable[Finding]) -> list[Alert]:
        """Events for the change between the book and `findings` of the detectors in `ran`."""
        out: list[Alert] = []
        found: set[str] = set()
        for f in _one_per_fingerprint(job, findings):
            fp = fingerprint(job, f.alert, f.subject)
            found.add(fp)
            held = self.current.get(fp)
            if held is not None and held.status == "firing":
                stale = (at - held.ts).total_seconds() >= self.refresh_s
                relinked = held.evidence.get("incident_id") != f.evidence.get("incident_id")
                if held.severity == f.severity and not stale and not relinked:
                    continue
                out.append(self._emit(job, fp, f, "firing", at, held.first_seen, f.evidence))
            else:
                first = min(f.since, at)
                out.append(self._emit(job, fp, f, "firing", at, first, f.evidence))
        ran_set = set(ran)
        for fp, held in list(self.current.items()):
            if held.job_id == job and held.status == "firing" and held.alert in ran_set and fp not in found:
                out.append(self._emit(job, fp, None, "resolved", at, held.first_seen, held.evidence))
        if self.ahead:  # judged again after a crash: applied above, already on the topic
            again = {a.event_id for a in out} & self.ahead
            self.ahead -= again
            out = [a for a in out if a.event_id not in again]
        return out

    def _emit(self, job: str, fp: str, f: Finding | None, status: str, at: datetime, first: datetime,
              evidence: dict[str, Any]) -> Alert:
        held = self.current.get(fp)
        src: Any = f if f is not None else held
        assert src is not None
        summary = src.summary if status == "firing" else f"resolved: {src.summary}"
        alert = Alert(
            event_id=_event_id(fp, status, at), job_id=job, host=src.host, ts=at, fingerprint=fp,
            alert=src.alert, subject=src.subject, status=status,  # type: ignore[arg-type]
            severity=src.severity, summary=summary[:2048], first_seen=first, last_seen=at, evidence=evidence,
        )
        self.current[fp] = alert
        return alert
