"""Groups: what one notification is about. An incident with its alerts, or alerts sharing a group key.

An alert belongs to an incident when the incident lists its fingerprint, or the alert's
evidence names the incident (`incident_id`); an alert of a host that an open incident names
as a victim (and not as a culprit) is inhibited into that incident too. Such alerts never
notify on their own: they ride in their incident's notification. Every other alert is
routed (routing.py) and grouped per route by the route's `group_by` labels (job + kind by
default). An incident is routed by its own labels (kind `incident`, its category, cause,
severity and culprit hosts). Pure: state and wall-clock time in, groups out.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import Literal

from vigil.contract import Alert, Incident
from vigil.contract.severity import rank, worst
from vigil.notify.classify import Classifier, Placement
from vigil.notify.matchers import alert_labels, incident_labels
from vigil.notify.routing import Router
from vigil.notify.settings import Timing
from vigil.notify.state import NotifyState

Role = Literal["alert", "listed", "victim"]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, kw_only=True)
class Member:
    alert: Alert
    role: Role
    muted_by: str | None = None  # id of the silence that mutes it


@dataclass(frozen=True, kw_only=True)
class Group:
    key: str
    route: str
    receivers: tuple[str, ...]
    timing: Timing
    labels: dict[str, str]
    job_id: str
    members: tuple[Member, ...]
    incident_id: str | None = None
    incident: Incident | None = None  # None for alerts naming an incident not (yet) seen
    muted_by: str | None = None  # the silence muting the incident itself

    def firing(self, include_muted: bool = False) -> tuple[str, ...]:
        """What this group pages about now: alert fingerprints, or `incident:<id>` for a known incident."""
        return self._firing_any if include_muted else self._firing_now

    def _firing(self, include_muted: bool) -> tuple[str, ...]:
        if self.incident is not None:
            live = self.incident.status == "open" and (include_muted or self.muted_by is None)
            return (f"incident:{self.incident.incident_id}",) if live else ()
        return tuple(sorted(m.alert.fingerprint for m in self.members
                            if m.alert.status == "firing" and (include_muted or m.muted_by is None)))

    @cached_property
    def _firing_now(self) -> tuple[str, ...]:
        return self._firing(False)

    @cached_property
    def _firing_any(self) -> tuple[str, ...]:
        return self._firing(True)

    def ordered(self) -> tuple[Member, ...]:
        """Firing first, most severe first, then oldest first: the order payloads list them in."""
        return tuple(sorted(self.members, key=lambda m: (m.alert.status != "firing",
                                                         -max(0, rank(m.alert.severity)),
                                                         m.alert.first_seen, m.alert.fingerprint)))

    def digest(self) -> str:
        """Changes when what on-call should know changes: an update is sent (at most every group interval)."""
        if self.incident is not None:
            i = self.incident
            doc: object = [i.status, i.severity, i.summary, i.cause, i.category, i.confidence,
                           [c.model_dump(mode="json") for c in i.culprits], len(i.victims), sorted(i.alerts)]
        else:
            doc = sorted((m.alert.fingerprint, m.alert.severity) for m in self.members
                         if m.alert.status == "firing" and m.muted_by is None)
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]

    def last_seen(self) -> datetime:
        """Newest evidence that it keeps firing: a repeat is sent only when this moved since the last send."""
        times = [m.alert.last_seen for m in self.members if m.alert.status == "firing"]
        if self.incident is not None:
            times.append(self.incident.ts)
        return max(times, default=EPOCH)

    def severity(self) -> str:
        sevs = [m.alert.severity for m in self.members if m.alert.status == "firing" and m.muted_by is None]
        if self.incident is not None:
            sevs.append(self.incident.severity)
        sevs = sevs or [m.alert.severity for m in self.members]
        return worst(sevs)


def _owners(state: NotifyState) -> tuple[dict[str, str], dict[tuple[str, str], str]]:
    """fingerprint -> incident listing it; (job, victim host) -> open incident naming it a victim."""
    owner: dict[str, str] = {}
    victims: dict[tuple[str, str], str] = {}
    for inc in sorted(state.incidents.values(), key=lambda i: (i.detected, i.incident_id)):
        for fp in inc.alerts:
            owner.setdefault(fp, inc.incident_id)
        if inc.status == "open":
            culprits = {c.host for c in inc.culprits}
            for v in inc.victims:
                if v.host not in culprits:
                    victims.setdefault((inc.job_id, v.host), inc.incident_id)
    return owner, victims


def build_groups(state: NotifyState, router: Router, now: datetime, classifier: Classifier | None = None,
                 outstanding: set[str] | frozenset[str] = frozenset()) -> list[Group]:
    """Every group there is now. Pass the same `classifier` on every call: it keeps per-alert work to one
    computation per alert event. A resolved alert is left out unless it belongs to an incident or is in
    `outstanding` (a receiver was told it fires): nothing else about it can change a decision."""
    classifier = classifier or Classifier(router)
    owner, victims = _owners(state)
    active = state.silences.active_ids(now)
    by_incident: dict[str, list[Member]] = defaultdict(list)
    plain: dict[str, tuple[Placement, list[Member]]] = {}
    for a in state.alerts.values():
        fp = a.fingerprint
        if a.status == "resolved" and fp not in outstanding and fp not in owner and "incident_id" not in a.evidence:
            continue
        c = classifier.of(a, state.silences)
        muted = next((sid for sid in c.silences if sid in active), None)
        incident_id = owner.get(a.fingerprint) or c.named_incident
        if incident_id is not None:
            by_incident[incident_id].append(Member(alert=a, role="listed", muted_by=muted))
            continue
        if victims and (a.job_id, a.host) in victims:
            by_incident[victims[(a.job_id, a.host)]].append(Member(alert=a, role="victim", muted_by=muted))
            continue
        for p in c.placements:
            plain.setdefault(p.key, (p, []))[1].append(Member(alert=a, role="alert", muted_by=muted))
    groups: list[Group] = []
    for key, (p, members) in plain.items():
        m = p.match
        groups.append(Group(key=key, route=m.route, receivers=m.receivers, timing=m.timing, labels=p.labels,
                            job_id=members[0].alert.job_id, members=tuple(members)))
    for incident_id in sorted(set(by_incident) | set(state.incidents)):
        groups.extend(_incident_groups(state, router, now, incident_id, by_incident.get(incident_id, [])))
    return groups


def _incident_groups(state: NotifyState, router: Router, now: datetime, incident_id: str,
                     members: list[Member]) -> list[Group]:
    inc = state.incidents.get(incident_id)
    if inc is not None:
        labels = incident_labels(inc)
        job = inc.job_id
    else:  # alerts name an incident not seen yet: route them by the first alert's labels, as an incident
        job = members[0].alert.job_id
        labels = {**alert_labels(members[0].alert), "kind": "incident", "incident_id": incident_id,
                  "host": tuple(dict.fromkeys(m.alert.host for m in members))}
    silence = state.silences.muting(labels, now)
    out = []
    for m in router.route(labels):
        out.append(Group(key=f"{m.route}|incident={incident_id}", route=m.route, receivers=m.receivers,
                         timing=m.timing, labels={"job": job, "incident_id": incident_id}, job_id=job,
                         members=tuple(members), incident_id=incident_id, incident=inc,
                         muted_by=silence.silence_id if silence else None))
    return out
