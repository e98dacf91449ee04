"""The incident stage: between the detectors and the alert book, at every evaluation instant.

`apply` turns the instant's findings into incident drafts (`build`), gives each its
stable id (`book`), then hands the findings on to the alert book rewritten: every finding
of an incident carries `incident_id` and `incident_role` (culprit / victim) in its evidence;
a victim's finding is demoted to `incidents.victim_severity` (it stays visible, it no
longer pages; `severity_before` keeps what it was); findings of a cascade still waiting for
its culprit are held back. The same rewrite happens at every instant, so the alert book
sees a stable severity. Before that, a symptom explained by a fault on its host (a straggler
on a host whose NIC drops, flaps or stops) is demoted to info (inhibit.py). Incident events
accumulate until `drain()`; live, the service
publishes them with the alerts; `replay` collects them the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from vigil.analyzer.alerts.book import fingerprint
from vigil.analyzer.detect.base import EvalContext, Finding, Severity
from vigil.analyzer.incidents.book import IncidentBook
from vigil.analyzer.incidents.build import build
from vigil.analyzer.incidents.inhibit import inhibit
from vigil.analyzer.incidents.roster import read_roster
from vigil.analyzer.settings import AnalyzerSettings
from vigil.contract import Incident, ParallelCoords
from vigil.contract.severity import rank


class IncidentStage:
    def __init__(self, settings: AnalyzerSettings, book: IncidentBook | None = None) -> None:
        self.settings = settings
        self.book = book if book is not None else IncidentBook(window_s=settings.incidents.window_s)
        self.events: list[Incident] = []

    def apply(self, ctx: EvalContext, findings: list[Finding], ran: Sequence[str]) -> list[Finding]:
        s = self.settings.incidents
        findings = inhibit(findings)
        built = build(findings, ctx.at, s)
        held = {id(f) for f in built.held}
        if not built.drafts and not self.book.open(ctx.job):
            return [f for f in findings if id(f) not in held]
        roster = read_roster(ctx) if built.drafts else {}
        coords = {r: ParallelCoords(**info.coords) for r, info in roster.items()}
        locals_ = {r: info.local_rank for r, info in roster.items() if info.local_rank is not None}
        fps: list[list[str]] = []
        severities: list[Severity] = []
        for d in built.drafts:
            linked = d.culprit_findings + d.victim_findings
            fps.append([fingerprint(ctx.job, f.alert, f.subject) for f in linked])
            d.evidence["alert_kinds"] = sorted({f.alert for f in linked})
            # an incident is as severe as the worst finding it groups
            severities.append(max((f.severity for f in linked), key=rank, default="critical"))
        ids, events = self.book.update(ctx.job, ctx.at, built.drafts, fps, severities, ran, coords, locals_)
        self.events += events
        role: dict[int, tuple[str, str]] = {}
        for d, iid in zip(built.drafts, ids, strict=True):
            for f in d.victim_findings:
                role[id(f)] = (iid, "victim")
            for f in d.culprit_findings:
                role[id(f)] = (iid, "culprit")
        return [self._linked(f, role.get(id(f))) for f in findings if id(f) not in held]

    def _linked(self, f: Finding, link: tuple[str, str] | None) -> Finding:
        if link is None:
            return f
        iid, kind = link
        evidence = {**f.evidence, "incident_id": iid, "incident_role": kind}
        victim_level = self.settings.incidents.victim_severity
        if kind == "victim" and rank(f.severity) > rank(victim_level):
            evidence["severity_before"] = f.severity
            return dataclasses.replace(f, severity=victim_level, evidence=evidence)
        return dataclasses.replace(f, evidence=evidence)

    def drain(self) -> list[Incident]:
        out, self.events = self.events, []
        return out
