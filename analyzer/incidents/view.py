"""Reading incidents back: fold incident events (from the topic, the source of truth) into current state."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from vigil.contract import Incident
from vigil.contract.latest import supersedes
from vigil.settings import VigilSettings


def read_incident_events(settings: VigilSettings, bootstrap: str, timeout: float = 10.0) -> list[Incident]:
    """Every verified incident event on the incidents topic, oldest first per partition (a forged one is left out
    and counted in a warning: `vigil.signing.readers`)."""
    return read_incidents_checked(settings, bootstrap, timeout)[0]


def read_incidents_checked(settings: VigilSettings, bootstrap: str, timeout: float = 10.0,
                           ) -> tuple[list[Incident], int]:  # fmt: skip
    """`read_incident_events` and how many unverified incident events it left out."""
    from vigil.kafka.reader import read_events
    from vigil.signing.readers import verified

    events = read_events(settings, bootstrap, "incidents", Incident, timeout=timeout)
    return verified(events, settings.home, "incidents")


def current(events: Iterable[Incident], job: str | None = None, include_resolved: bool = True) -> list[Incident]:
    """The latest event of each incident (`vigil.contract.latest`), newest first."""
    state: dict[str, Incident] = {}
    for e in events:
        held = state.get(e.incident_id)
        if supersedes(e, held):
            state[e.incident_id] = e
    rows = [i for i in state.values() if (job is None or i.job_id == job) and (include_resolved or i.status == "open")]
    return sorted(rows, key=lambda i: (i.first_sign, i.incident_id), reverse=True)


def as_json(i: Incident) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(i.model_dump_json())
    return doc


def _who(host: str, rank: int | None) -> str:
    return f"{host} rank {rank}" if rank is not None else f"host {host}"


def format_incident(i: Incident) -> str:
    """A few lines: what, the culprit with its own message, the victims, the linked alerts."""
    lines = [f"{i.status:<8} {i.severity:<8} {i.job_id} {i.category} ({i.cause}, {i.confidence} evidence)  "
             f"first sign {i.first_sign:%Y-%m-%d %H:%M:%S}  id {i.incident_id}", f"  {i.summary}"]
    for c in i.culprits:
        lines.append(f"  culprit  {_who(c.host, c.rank)}: {c.message or '(no message)'}")
    if i.victims:
        shown = ", ".join(_who(v.host, v.rank) for v in i.victims[:16])
        more = f" (+{len(i.victims) - 16} more)" if len(i.victims) > 16 else ""
        lines.append(f"  victims  {shown}{more}")
    if i.alerts:
        lines.append(f"  alerts   {len(i.alerts)} linked (they do not page on their own)")
    return "\n".join(lines)
