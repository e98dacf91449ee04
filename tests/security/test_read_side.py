"""The read side verifies: the analyzer's ingest runs the signing gate on decisions before they are stored.

A forged decision (here an unsigned `pause ... started`, which used to hide the job's real crashes from the
log detector for 600 s, and an incident signed by the operator's key) is stored flagged `verified = 0` with its
signature, so it can be shown as an unverified claim; the detectors' pause windows and the current incidents
read verified rows only. The genuine, signed ones are stored verified.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.clickhouse.client import connect
from vigil.contract import Incident, RecoveryAction
from vigil.signing import KeyStore, Role, check
from vigil.signing.seal import Ed25519Signer, KeyRing

pytestmark = pytest.mark.clickhouse
NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def _signer(store: KeyStore, role: Role) -> Ed25519Signer:
    kid, key = store.private_key(role)
    return Ed25519Signer(role=role, key_id=kid, key=key)


def test_forged_decisions_are_stored_unverified_and_never_read_by_detectors(clickhouse_dsn: str, database: str,
                                                                           tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    store.ensure()
    ring = KeyRing(load=store.public_keys)
    pause = {"job_id": "j", "host": "controller", "ts": NOW, "action": "pause", "target": "j", "status": "started",
             "incident_id": "i", "actor": "controller"}
    forged = RecoveryAction(**pause)  # type: ignore[arg-type]
    genuine = _signer(store, Role.CONTROLLER).seal(RecoveryAction(**{**pause, "incident_id": "i2"}))  # type: ignore[arg-type]
    incident = {"job_id": "j", "host": "h1", "category": "host_fault", "cause": "hardware", "status": "open",
                "severity": "critical", "summary": "s", "first_sign": NOW, "detected": NOW}
    wrong = _signer(store, Role.OPERATOR).seal(Incident(incident_id="forged", **incident))  # type: ignore[arg-type]
    real = _signer(store, Role.ANALYZER).seal(Incident(incident_id="real", **incident))  # type: ignore[arg-type]
    client = connect(clickhouse_dsn, database=database)
    writer = ClickHouseWriter(client=client, verify=lambda e: check(e, ring) is None)
    assert writer.write([forged, genuine, wrong, real]) == []

    rows = client.query("SELECT incident_id, verified, signature FROM recovery_actions ORDER BY incident_id").result_rows
    assert rows == [("i", 0, ""), ("i2", 1, genuine.signature)]
    paused = client.query("SELECT incident_id FROM recovery_actions WHERE job_id = 'j' AND action IN ('pause', 'halt') "
                          "AND target = 'j' AND verified = 1").result_rows  # the log detector's pause windows
    assert paused == [("i2",)]
    assert client.query("SELECT incident_id, verified FROM incident_events ORDER BY incident_id").result_rows == [
        ("forged", 0), ("real", 1)]
    assert client.query("SELECT incident_id FROM incidents_current").result_rows == [("real",)]
    assert client.query("SELECT count() FROM job_registrations").result_rows == [(0,)]
