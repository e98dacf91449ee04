"""Unverified claims on the dashboard: a forged alert and a forged halt, stored by the analyzer's writer flagged
``verified = 0``, are shown on the alerts and recovery pages marked as unverified claims, never as what happened."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.support.dashhttp import render_page, texts
from vigil.contract import Alert, RecoveryAction
from vigil.dashboard.queries import claims as q
from vigil.dashboard.store import Store

pytestmark = pytest.mark.clickhouse
NOW = datetime.now(UTC).replace(microsecond=0)
ALERT = {"job_id": "j", "host": "h1", "alert": "straggler", "subject": "h1", "status": "firing",
         "severity": "critical", "summary": "s", "first_seen": NOW, "last_seen": NOW}


def test_forged_decisions_are_shown_marked_as_unverified_claims(clickhouse_dsn: str) -> None:
    from vigil.analyzer.ingest.writer import ClickHouseWriter
    from vigil.app.components import migrate_all
    from vigil.clickhouse.client import connect
    from vigil.dashboard.service import DashboardService
    from vigil.dashboard.settings import DashboardSettings

    client: Any = connect(clickhouse_dsn, database=f"t_claims_{uuid.uuid4().hex[:8]}")
    migrate_all(client, 3650)
    forged = [Alert(fingerprint="j/straggler/forged", **ALERT),  # type: ignore[arg-type]
              RecoveryAction(job_id="j", host="controller", ts=NOW, action="halt", target="j", status="succeeded",
                             incident_id="forged-case", actor="controller", reason="forged halt")]
    assert ClickHouseWriter(client=client, verify=lambda _e: False).write(forged) == []
    genuine = Alert(fingerprint="j/straggler/real", **{**ALERT, "subject": "h2"})  # type: ignore[arg-type]
    assert ClickHouseWriter(client=client, verify=lambda _e: True).write([genuine]) == []
    store = Store(client=client)
    assert sorted((r["source"], r["signed"]) for r in q.unverified(store, q.ALERTS + q.RECOVERY, "j")) == [
        ("alert", 0), ("recovery action", 0)]
    assert [r["source"] for r in q.unverified(store, q.RECOVERY, "other")] == []

    svc = DashboardService(client=client, settings=DashboardSettings(port=0))
    svc.start()
    try:
        alerts = texts(render_page(svc.url, "/alerts", "?job=j&range=all"))
        recovery = texts(render_page(svc.url, "/recovery", "?job=j"))
    finally:
        svc.stop()
    assert "unverified claim" in alerts and "straggler h1 firing (critical)" in alerts
    assert "straggler h2 firing (critical)" not in alerts  # the genuine one is no claim
    assert "unverified claim" in recovery and "halt j succeeded" in recovery and "forged halt" in recovery
    assert "recovery action" not in alerts and "alert" not in recovery  # each page its own kinds
