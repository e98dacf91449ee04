"""Reading alerts back: fold alert events (from the topic, the source of truth) into current state."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from vigil.contract import Alert
from vigil.contract.latest import supersedes
from vigil.settings import VigilSettings


def fold(alerts: Iterable[Alert]) -> dict[str, Alert]:
    """Latest event per fingerprint (`vigil.contract.latest`)."""
    out: dict[str, Alert] = {}
    for a in alerts:
        held = out.get(a.fingerprint)
        if supersedes(a, held):
            out[a.fingerprint] = a
    return out


def read_alert_events(settings: VigilSettings, bootstrap: str, timeout: float = 10.0) -> list[Alert]:
    """Every verified alert event on the alerts topic, oldest first per partition (`vigil.signing.readers`: a
    forged one is left out and counted in a warning; security alerts are claims, kept)."""
    return read_alerts_checked(settings, bootstrap, timeout)[0]


def read_alerts_checked(settings: VigilSettings, bootstrap: str, timeout: float = 10.0) -> tuple[list[Alert], int]:
    """`read_alert_events` and how many unverified alert events it left out."""
    from vigil.kafka.reader import read_events
    from vigil.signing.readers import verified

    return verified(read_events(settings, bootstrap, "alerts", Alert, timeout=timeout), settings.home, "alerts")


def current(alerts: Iterable[Alert], job: str | None = None, include_resolved: bool = False) -> list[Alert]:
    state = fold(alerts)
    rows = [a for a in state.values() if (job is None or a.job_id == job)
            and (include_resolved or a.status == "firing")]
    return sorted(rows, key=lambda a: (a.job_id, a.first_seen, a.fingerprint))


def as_json(a: Alert) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(a.model_dump_json())
    return doc


def format_line(a: Alert) -> str:
    return (f"{a.status:<8} {a.severity:<8} {a.job_id} {a.alert:<14} {a.subject:<28} "
            f"since {a.first_seen:%Y-%m-%d %H:%M:%S}  {a.summary}")
