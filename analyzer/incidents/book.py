"""The incident book: drafts at an instant -> Incident events with a stable id and a lifecycle.

A draft continues an open incident of its job when they share a culprit or victim (host,
rank; a host-wide party, rank None, is shared with every rank of its host: the launcher's
exit and its rank's exit are one failure) and their first signs lie within `window_s`: the incident keeps its id (assigned
when it opened: `job/category/culprit-host/rN/first-sign`), and is re-published (`open`)
only when what is known changed (culprits, victims, category, cause, confidence, linked
alerts, or the run its finding was judged in: evidence `run`, a replay after a rollback). An open incident no draft continues is `resolved`, but only at an instant where
every detector behind its alerts ran (a failed detector is no evidence of recovery).
Event ids derive from (incident_id, status, ts), so a re-publication after a crash is the
same event; the book is rebuilt from the incidents topic at start (`restore`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from vigil.analyzer.incidents.draft import Draft, Party
from vigil.contract import Incident, ParallelCoords, RankRef
from vigil.contract.latest import supersedes
from vigil.contract.telemetry import Severity

RESOLVED_KEEP = timedelta(days=1)


def _event_id(incident_id: str, status: str, ts: datetime) -> str:
    return hashlib.sha1(f"{incident_id}|{status}|{ts.isoformat()}".encode()).hexdigest()[:32]


def incident_id(job: str, d: Draft) -> str:
    head = d.culprits[0] if d.culprits else None
    who = f"{head.host}/r{head.rank}" if head and head.rank is not None else f"{head.host}/host" if head else "unknown"
    return f"{job}/{d.category}/{who}/{d.first_sign:%Y%m%dT%H%M%S}"[:256]


def _ref(p: Party, coords: Mapping[int, ParallelCoords], locals_: Mapping[int, int]) -> RankRef:
    return RankRef(host=p.host, rank=p.rank, local_rank=locals_.get(p.rank) if p.rank is not None else None,
                   coords=coords.get(p.rank) if p.rank is not None else None, message=p.message[:4096])


def _parties(incident: Incident) -> set[tuple[str, int | None]]:
    return {(r.host, r.rank) for r in [*incident.culprits, *incident.victims]}


def _overlap(a: set[tuple[str, int | None]], b: set[tuple[str, int | None]]) -> int:
    """How many parties of `a` are in `b`: the same rank of the same host, or either one host-wide."""
    return sum(1 for host, rank in a if any(h == host and (r == rank or r is None or rank is None) for h, r in b))


@dataclass(kw_only=True)
class IncidentBook:
    window_s: float = 120.0
    current: dict[str, Incident] = field(default_factory=dict)

    def restore(self, events: Iterable[Incident]) -> None:
        for e in events:
            held = self.current.get(e.incident_id)
            if supersedes(e, held):
                self.current[e.incident_id] = e

    def open(self, job: str | None = None) -> list[Incident]:
        return [i for i in self.current.values() if i.status == "open" and (job is None or i.job_id == job)]

    def _match(self, job: str, d: Draft, taken: set[str]) -> Incident | None:
        best: tuple[int, Incident] | None = None
        for inc in self.open(job):
            if inc.incident_id in taken or abs((inc.first_sign - d.first_sign).total_seconds()) > self.window_s:
                continue
            overlap = _overlap(_parties(inc), d.parties)
            if overlap and (best is None or overlap > best[0]):
                best = (overlap, inc)
        return best[1] if best else None

    def update(self, job: str, at: datetime, drafts: Sequence[Draft], fingerprints: Sequence[list[str]],
               severities: Sequence[Severity], ran: Iterable[str], coords: Mapping[int, ParallelCoords],
               locals_: Mapping[int, int]) -> tuple[list[str], list[Incident]]:
        """(the incident id of each draft, the events this instant produces)."""
        ids: list[str] = []
        out: list[Incident] = []
        taken: set[str] = set()
        for d, fps, severity in zip(drafts, fingerprints, severities, strict=True):
            held = self._match(job, d, taken)
            iid = held.incident_id if held is not None else incident_id(job, d)
            taken.add(iid)
            ids.append(iid)
            head = d.culprits[0] if d.culprits else None
            new = Incident(
                event_id=_event_id(iid, "open", at), job_id=job, host=head.host if head else (held.host if held else
                                                                                              "unknown"),
                ts=at, incident_id=iid, category=d.category, cause=d.cause, status="open", severity=severity,
                summary=d.summary[:2048], culprits=[_ref(p, coords, locals_) for p in d.culprits],
                victims=[_ref(p, coords, locals_) for p in d.victims], confidence="strong" if d.strong else "weak",
                alerts=sorted(set(fps)), first_sign=min(d.first_sign, at),
                detected=held.detected if held is not None else at, evidence=d.evidence)
            if held is None or _changed(held, new):
                out.append(new)
                self.current[iid] = new
        ran_set = set(ran)
        for inc in self.open(job):
            kinds = set(inc.evidence.get("alert_kinds") or [])
            if inc.incident_id in taken or not kinds <= ran_set:
                continue
            done = inc.model_copy(update={"event_id": _event_id(inc.incident_id, "resolved", at), "ts": at,
                                          "status": "resolved", "summary": f"resolved: {inc.summary}"[:2048]})
            self.current[inc.incident_id] = done
            out.append(done)
        for iid in [i for i, inc in self.current.items() if inc.status == "resolved" and at - inc.ts > RESOLVED_KEEP]:
            del self.current[iid]  # bounded memory: long resolved incidents are only in the topic and the table
        return ids, out


def _changed(old: Incident, new: Incident) -> bool:
    keys = ("category", "cause", "confidence", "severity", "culprits", "victims", "alerts")
    # a finding of another run of the job (a replica digest judged in the replay after a rollback) is news too
    return any(getattr(old, k) != getattr(new, k) for k in keys) or old.evidence.get("run") != new.evidence.get("run")


