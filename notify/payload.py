"""The notification document (schema `vigil.notification`, version 1) and the decision that carries it.

One document per (group, receiver, sequence number), built when the decision is taken and
stored with it, so every retry (after a restart too) sends the same bytes. Its fields are
documented in docs/notifications.md ("Notification payload"); a breaking change bumps `version`. The
idempotency key is made from (receiver, group key, sequence number, and the time of the previous
decision or of the group's start), stored with the decision and sent with every attempt in the
`Idempotency-Key` header.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vigil.contract import Alert, Incident
from vigil.notify.grouping import Group, Member
from vigil.notify.links import Links
from vigil.notify.planner import Decision, Reason, Sent, Status
from vigil.notify.state import NotifyState

SCHEMA = "vigil.notification"
VERSION = 1
MAX_ALERTS = 50
MAX_VICTIMS = 20


@dataclass(frozen=True, kw_only=True)
class Notification:
    """A decision to tell one receiver about one group, with its document."""

    key: str
    receiver: str
    group_key: str
    route: str
    seq: int
    status: Status
    reason: Reason
    job_id: str
    severity: str
    title: str
    firing: tuple[str, ...]
    digest: str
    last_seen: datetime
    created: datetime
    doc: dict[str, Any]

    def sent(self) -> Sent:
        return Sent(seq=self.seq, status=self.status, firing=self.firing, digest=self.digest,
                    at=self.created.timestamp(), last_seen=self.last_seen, job_id=self.job_id, route=self.route)


def idempotency_key(receiver: str, group_key: str, seq: int, anchor: float) -> str:
    """The same for a decision taken again (its save failed, perhaps after ClickHouse stored it after all, so
    the row is replaced, not doubled); different when a group's sequence starts over after its log expired."""
    text = f"{receiver}\x00{group_key}\x00{seq}\x00{round(anchor * 1000)}"
    return "vn1-" + hashlib.sha256(text.encode()).hexdigest()[:32]


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _alert_doc(a: Alert, links: Links, role: str, muted_by: str | None, note: str = "") -> dict[str, Any]:
    doc: dict[str, Any] = {
        "fingerprint": a.fingerprint, "alert": a.alert, "subject": a.subject, "host": a.host, "status": a.status,
        "severity": a.severity, "summary": a.summary, "first_seen": _iso(a.first_seen), "last_seen": _iso(a.last_seen),
        "evidence": a.evidence, "role": role, "muted_by": muted_by, "url": links.alert(a)}
    if note:
        doc["note"] = note
    return doc


def _incident_doc(i: Incident) -> dict[str, Any]:
    doc: dict[str, Any] = i.model_dump(mode="json", exclude={"kind", "schema_version", "event_id", "host", "ts", "signature"})
    doc["victims_total"] = len(i.victims)
    doc["victims"] = doc["victims"][:MAX_VICTIMS]
    return doc


def _members(d: Decision, state: NotifyState) -> list[tuple[Alert, str, str | None, str]]:
    """(alert, role, muted_by, note): the group's alerts, and those of the last notification that left it."""
    members: tuple[Member, ...] = d.group.ordered() if d.group else ()
    out: list[tuple[Alert, str, str | None, str]] = [(m.alert, m.role, m.muted_by, "") for m in members]
    known = {m.alert.fingerprint for m in members}
    for fp in d.previous.firing if d.previous else ():
        a = state.alerts.get(fp)
        if a is None or fp in known:
            continue
        owner = next((i.incident_id for i in state.incidents.values() if fp in i.alerts), None)
        out.append((a, "alert", None, f"now part of incident {owner}" if owner else ""))
    return out


def _title(status: str, job: str, incident: Incident | None, alerts: list[Alert]) -> str:
    tag = "[RESOLVED]" if status == "resolved" else "[FIRING]"
    if incident is not None:
        text = incident.summary
    elif not alerts:
        text = "(no alerts)"
    elif len(alerts) == 1:
        text = alerts[0].summary.removeprefix("resolved: ")
    else:
        kinds = sorted({a.alert for a in alerts})
        hosts = list(dict.fromkeys(a.host for a in alerts))
        text = f"{len(alerts)} {'/'.join(kinds)} alerts on {', '.join(hosts[:5])}{' ...' if len(hosts) > 5 else ''}"
        tag = tag[:-1] + f":{len(alerts)}]"
    return f"{tag} {job}: {text}"[:300]


def build(d: Decision, state: NotifyState, links: Links, created: datetime) -> Notification:
    g: Group | None = d.group
    prev = d.previous
    incident = g.incident if g else None
    job = g.job_id if g else (prev.job_id if prev else "")
    members = _members(d, state)
    if g is not None and d.status == "firing":
        shown = [m.alert for m in g.ordered() if m.alert.status == "firing" and m.muted_by is None]
    else:
        shown = [a for a, *_ in members]
    severity = g.severity() if g else "info"
    primary = links.incident(incident) if incident else (links.alert(shown[0]) if shown else links.alerts(job))
    doc: dict[str, Any] = {
        "schema": SCHEMA, "version": VERSION, "key": idempotency_key(d.receiver, d.group_key, d.seq, d.anchor),
        "receiver": d.receiver, "status": d.status, "reason": d.reason, "sequence": d.seq,
        "group": {"key": d.group_key, "route": g.route if g else (prev.route if prev else ""),
                  "labels": g.labels if g else {}},
        "title": _title(d.status, job, incident, shown), "job_id": job, "severity": severity,
        "incident": _incident_doc(incident) if incident else None,
        "incident_id": g.incident_id if g else None,
        "alerts": [_alert_doc(a, links, role, muted, note) for a, role, muted, note in members[:MAX_ALERTS]],
        "alerts_total": len(members),
        "counts": {"firing": sum(a.status == "firing" for a, *_ in members),
                   "resolved": sum(a.status == "resolved" for a, *_ in members)},
        "links": {"dashboard": primary, "alerts": links.alerts(job)},
        "created_at": _iso(created),
    }
    firing = g.firing() if (g and d.status == "firing") else ()
    return Notification(
        key=doc["key"], receiver=d.receiver, group_key=d.group_key, route=doc["group"]["route"], seq=d.seq,
        status=d.status, reason=d.reason, job_id=job, severity=severity, title=doc["title"], firing=firing,
        digest=g.digest() if g else "", last_seen=g.last_seen() if g else (prev.last_seen if prev else created),
        created=created, doc=doc)


def encode(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False, default=str).encode()
