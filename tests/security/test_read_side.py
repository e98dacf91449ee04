"""The read side verifies: the analyzer's ingest and the CLI's folds run the signing gate on decisions.

A forged decision (here an unsigned `pause ... started`, which used to hide the job's real crashes from the
log detector for 600 s, and an incident signed by the operator's key) is stored flagged `verified = 0` with its
signature, so it can be shown as an unverified claim; the detectors' pause windows and the current incidents
read verified rows only. The genuine, signed ones are stored verified.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer

from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.app.cli.main import main
from vigil.clickhouse.client import connect
from vigil.contract import Alert, Incident, Member, RecoveryAction, Silence, encode_batch
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings
from vigil.signing import KeyStore, Role, check
from vigil.signing.seal import Ed25519Signer, KeyRing

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def _signer(store: KeyStore, role: Role) -> Ed25519Signer:
    kid, key = store.private_key(role)
    return Ed25519Signer(role=role, key_id=kid, key=key)


@pytest.mark.clickhouse
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
    evil = Member(job_id="j", host="evil-1", state="waiting")  # a made-up host, unattested
    store.issue("h1")
    h1 = Ed25519Signer(role=Role.AGENT, key_id=store.current_id(Role.AGENT, "h1") or "", key=store.private_key(
        Role.AGENT, "h1")[1]).seal(Member(job_id="j", host="h1", state="waiting"))
    ring = KeyRing(load=store.public_keys)
    writer = ClickHouseWriter(client=client, verify=lambda e: check(e, ring) is None)
    assert writer.write([forged, genuine, wrong, real, evil, h1]) == []
    assert client.query("SELECT host, verified FROM recovery_members ORDER BY host").result_rows == [
        ("evil-1", 0), ("h1", 1)]

    rows = client.query("SELECT incident_id, verified, signature FROM recovery_actions ORDER BY incident_id").result_rows
    assert rows == [("i", 0, ""), ("i2", 1, genuine.signature)]
    paused = client.query("SELECT incident_id FROM recovery_actions WHERE job_id = 'j' AND action IN ('pause', 'halt') "
                          "AND target = 'j' AND verified = 1").result_rows  # the log detector's pause windows
    assert paused == [("i2",)]
    assert client.query("SELECT incident_id, verified FROM incident_events ORDER BY incident_id").result_rows == [
        ("forged", 0), ("real", 1)]
    assert client.query("SELECT incident_id FROM incidents_current").result_rows == [("real",)]
    assert client.query("SELECT count() FROM job_registrations").result_rows == [(0,)]


@pytest.mark.kafka
def test_cli_folds_leave_forged_decisions_out(topics: VigilSettings, clickhouse_dsn: str,
                                              monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A forged "every job, 10 years" silence, a forged critical alert, incident and halt, produced to their topics
    without a key, are not listed as real by `vigil silence list`, `vigil alerts`, `vigil incidents` and `vigil
    recovery history`, and each says how many it left out; the signed ones are listed."""
    for k, v in {"VIGIL_HOME": str(topics.home), "VIGIL_KAFKA_BOOTSTRAP": str(topics.kafka_bootstrap),
                 "VIGIL_TOPIC_PREFIX": topics.topic_prefix, "VIGIL_CLICKHOUSE_DSN": clickhouse_dsn}.items():
        monkeypatch.setenv(k, v)
    now = datetime.now(UTC)
    forged_silence = Silence(job_id="*", host="*", silence_id="forged", matchers={"job": "*"}, starts_at=now,
                             ends_at=now + timedelta(days=3650), created_by="mallory", reason="quiet")
    alert = {"job_id": "j", "host": "h1", "alert": "straggler", "subject": "h1", "status": "firing",
             "severity": "critical", "summary": "s", "first_seen": now, "last_seen": now}
    forged_alert = Alert(fingerprint="j/straggler/forged", **alert)  # type: ignore[arg-type]
    forged_incident = Incident(incident_id="forged", job_id="j", host="h1", category="host_fault", cause="hardware",
                               status="open", severity="critical", summary="s", first_sign=now, detected=now)
    forged_halt = RecoveryAction(job_id="j", host="controller", action="halt", target="j", status="succeeded",
                                 incident_id="forged", actor="controller")
    p = Producer({"bootstrap.servers": topics.kafka_bootstrap})
    for topic, e in (("silences", forged_silence), ("alerts", forged_alert), ("incidents", forged_incident),
                     ("recovery", forged_halt)):
        p.produce(topics.topic(topic), value=encode_batch([e]), key=b"x")
    assert p.flush(15) == 0
    store = KeyStore(topics.home / "keys")
    genuine = _signer(store, Role.ANALYZER).seal(Alert(fingerprint="j/straggler/real", **alert))  # type: ignore[arg-type]
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
    producer.send([genuine])
    producer.flush(15)
    assert main(["silence", "add", "--match", "job=j", "--for", "1h", "--reason", "r", "--by", "alice"]) == 0
    capsys.readouterr()

    assert main(["silence", "list", "--json"]) == 0
    out = capsys.readouterr()
    assert [s["created_by"] for s in json.loads(out.out)] == ["alice"]
    assert "1 unverified silences left out" in out.err
    assert main(["alerts", "--json"]) == 0
    out = capsys.readouterr()
    assert [a["fingerprint"] for a in json.loads(out.out)] == ["j/straggler/real"]
    assert "(1 unverified alert events left out" in out.err  # each fold says how many it left out
    assert main(["incidents", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out) == [] and "(1 unverified incident events left out" in out.err
    assert main(["recovery", "history", "--json"]) == 0
    out = capsys.readouterr()
    assert "forged" not in out.out and "(3 unverified recovery events left out" in out.err  # halt, incident, alert
