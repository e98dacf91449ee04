"""Inhibition: a symptom's finding does not page while the fault that explains it does.

Alertmanager's inhibit rules, as data: while a *source* finding (a NIC's `traffic_stall`,
warning or worse) holds on a host, a *target* finding on the same host (`straggler`) is
its symptom: a host whose link drops, flaps or stops computes late in the steps that wait
on it. The target stays visible, demoted to `info`, with `inhibited_by` (the source's
subject) and `severity_before` in its evidence, so one fault pages once. Judged per
instant on that instant's findings alone (live and replay alike). Pure logic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from vigil.analyzer.detect.base import Finding


@dataclass(frozen=True, kw_only=True)
class Inhibition:
    source: str  # alert whose finding explains ...
    target: str  # ... this alert's findings on the same host
    host_subjects_only: bool = True  # the source must be about one host (`host/...`), not the whole job


RULES: tuple[Inhibition, ...] = (Inhibition(source="traffic_stall", target="straggler"),)


def inhibit(findings: Sequence[Finding], rules: Sequence[Inhibition] = RULES) -> list[Finding]:
    """`findings` with every target explained by a source on its host demoted to info."""
    out = list(findings)
    for rule in rules:
        sources = {f.host: f.subject for f in findings if f.alert == rule.source and f.severity != "info"
                   and (not rule.host_subjects_only or f.subject.startswith(f"{f.host}/"))}
        if not sources:
            continue
        out = [dataclasses.replace(f, severity="info", evidence={
                   **f.evidence, "inhibited_by": f"{rule.source}:{sources[f.host]}", "severity_before": f.severity})
               if f.alert == rule.target and f.host in sources and f.severity != "info" else f for f in out]
    return out
