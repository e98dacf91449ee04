"""Alert and incident events for notifier tests: what the analyzer publishes, made by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from vigil.contract import Alert, Incident, RankRef

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3)  # the tests run up to ~2 h past T0: never ahead of now


def alert(job: str, kind: str, subject: str, *, host: str | None = None, status: str = "firing",
          severity: str = "warning", at: float = 0.0, **evidence: Any) -> Alert:
    ts = T0 + timedelta(seconds=at)
    return Alert(job_id=job, host=host or subject.split("/")[0], ts=ts, fingerprint=f"{job}/{kind}/{subject}",
                 alert=kind, subject=subject, status=status, severity=severity,  # type: ignore[arg-type]
                 summary=f"{kind} on {subject}" if status == "firing" else f"resolved: {kind} on {subject}",
                 first_seen=T0, last_seen=ts, evidence=evidence)


def straggler(job: str, host: str, **kw: Any) -> Alert:
    return alert(job, "straggler", f"{host}/forward", host=host, slowdown_pct=9.5, phase="forward", **kw)


def xid(job: str, host: str, **kw: Any) -> Alert:
    return alert(job, "error_log", f"{host}/xid", host=host, severity="critical", xid=79, **kw)


def incident(job: str, incident_id: str, culprit: str, *, alerts: list[str], victims: list[str] = (),  # type: ignore[assignment]
             status: str = "open", at: float = 0.0, summary: str = "") -> Incident:
    ts = T0 + timedelta(seconds=at)
    return Incident(job_id=job, host=culprit, ts=ts, incident_id=incident_id, category="crash_cascade",
                    cause="hardware", status=status, severity="critical",  # type: ignore[arg-type]
                    summary=summary or f"{culprit} rank 5 failed first (NVLink error); {len(victims)} ranks followed",
                    culprits=[RankRef(host=culprit, rank=5, message="RuntimeError: CUDA error: uncorrectable NVLink")],
                    victims=[RankRef(host=v, rank=i) for i, v in enumerate(victims)], alerts=alerts,
                    first_sign=T0, detected=ts)
