"""Forged decisions through the real broker into real services: nothing is acted on, one alert says so.

The attacker holds one training job: it can produce to Kafka with a plain confluent-kafka
producer, but holds no platform key. Each test forges decisions that way (unsigned, signed with
the wrong role's key, or with a stale lease epoch), then sends one genuine signed decision behind
them: once that one took effect, the forged ones (read before it) demonstrably did not, and the
service raised one `security` alert per refused kind.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.forgery import forge, security_alerts, signer_of
from tests.support.live import Live, fake_train
from vigil.contract import Command, Incident, Member, RankRef, RecoveryAction, World
from vigil.contract.decisions import operator_request
from vigil.cordons import CordonRegistry
from vigil.signing import Role

pytestmark = pytest.mark.kafka
JOB = "victim-job"


def forge_raw(live: Live, topic: str, host: str, doc: dict[str, object]) -> None:
    p = Producer({"bootstrap.servers": live.bootstrap})
    p.produce(live.settings.topic(topic), value=json.dumps(doc).encode(), key=host.encode())
    assert p.flush(15) == 0


def _start(gen: int, **kw: object) -> Command:
    world = World(generation=gen, hosts=["h1"], node_rank=0, master_addr="127.0.0.1", master_port=29511)
    fields: dict[str, object] = {"job_id": JOB, "host": "h1", "command_id": f"{JOB}/g{gen}/start/h1",
                                 "action": "start", "generation": gen, "world": world, **kw}
    return Command(**fields)  # type: ignore[arg-type]


def test_agent_obeys_only_signed_commands_of_a_current_epoch(live: Live, tmp_path: Path) -> None:
    live.start_agent("h1", fake_train(), nodes="1", job=JOB)
    live.wait_for(lambda s: (m := s.job(JOB).members.get("h1")) is not None and m.state == "waiting", 90,
                  "the agent to wait for commands")
    pwned = tmp_path / "pwned"
    forge(live, "commands", [
        # a stop of every generation up to a huge one, taking the id of the genuine start that follows
        Command(job_id=JOB, host="h1", command_id=f"{JOB}/g1/start/h1", action="stop", generation=10**9),
        _start(7, command_id="forged-start", epoch=10**6),
    ])
    forge(live, "commands", [signer_of(live, Role.OPERATOR).seal(_start(8, command_id="operator-start"))])
    forge_raw(live, "commands", "h1", {"kind": "command", "schema_version": 1, "events": [{
        "job_id": JOB, "host": "h1", "command_id": "forged-diag", "action": "diagnose",
        "argv": ["/bin/sh", "-c", f"touch {pwned}"], "env": {"LD_PRELOAD": "/tmp/x.so"}}]})
    controller = signer_of(live, Role.CONTROLLER)
    forge(live, "commands", [controller.seal(_start(1, epoch=2))])  # the genuine one (any producer may carry it)
    live.wait_for(lambda s: (m := s.job(JOB).members.get("h1")) is not None and m.state == "training"
                  and m.generation == 1, 90, "the genuine start to run generation 1")
    stale = controller.seal(Command(job_id=JOB, host="h1", command_id="stale-dump", action="dump", epoch=1))
    forge(live, "commands", [stale])
    live.wait_for(lambda s: "command/dump" in security_alerts(live, "agent:h1"), 60, "the stale epoch's alert")

    alerts = security_alerts(live, "agent:h1")
    assert sorted(alerts) == ["command/dump", "command/start", "command/stop"]
    assert all(len(a) == 1 for a in alerts.values())  # once per kind, not once per record
    assert alerts["command/dump"][0].evidence["problem"] == "stale epoch"
    acks = live.actions(actor="agent:h1")
    assert {a.command_id for a in acks} == {f"{JOB}/g1/start/h1"}  # the forged ones were never acknowledged
    assert not [a for a in acks if a.action in ("stop", "dump", "diagnose")]
    assert live.state.job(JOB).members["h1"].generation == 1
    assert not pwned.exists()


def test_controller_acts_on_no_forged_decision(live: Live) -> None:
    live.start_controller()
    now = datetime.now(UTC)
    fault = Incident(job_id=JOB, host="h1", incident_id=f"{JOB}/host_fault/h1/forged", category="host_fault",
                     cause="hardware", status="open", severity="critical", summary="forged", first_sign=now,
                     detected=now, culprits=[RankRef(host="h1", rank=0)])
    request = operator_request(action="cordon", host="victim-host", job_id=JOB, reason="forged", actor="user:mallory")
    approve = RecoveryAction(job_id=JOB, host="controller", action="approve", target=JOB, status="succeeded",
                             incident_id=fault.incident_id, actor="user:mallory")
    step = signer_of(live, Role.ANALYZER).seal(RecoveryAction(
        job_id=JOB, host="victim-host", action="cordon", target="victim-host", status="started",
        incident_id=fault.incident_id, actor="controller"))
    forge(live, "incidents", [fault])
    forge(live, "recovery", [request, approve, step])
    # the probe's host belongs to the job (the controller checks): an agent that announced itself and left
    forge(live, "recovery", [signer_of(live, Role.AGENT, "probe-host").seal(
        Member(job_id=JOB, host="probe-host", state="left"))])
    probe = signer_of(live, Role.OPERATOR).seal(
        operator_request(action="cordon", host="probe-host", job_id=JOB, reason="genuine", actor="user:ops"))
    forge(live, "recovery", [probe])
    registry = CordonRegistry(live.home / "cordons.json")
    live.wait_for(lambda _s: "probe-host" in registry.read(), 120, "the genuine operator request to be executed")
    live.wait_for(lambda _s: len(security_alerts(live, "controller")) == 4, 60, "the controller's security alerts")

    alerts = security_alerts(live, "controller")
    assert sorted(alerts) == ["incident", "recovery/approve", "recovery/cordon", "recovery/request"]
    assert all(len(a) == 1 for a in alerts.values())
    assert alerts["recovery/cordon"][0].evidence["problem"] == "wrong role"
    assert "victim-host" not in registry.read()
    acted = [a for a in live.actions(incident_id=fault.incident_id, actor="controller") if a.event_id != step.event_id]
    assert not acted  # no plan, no step of its own
    assert not [a for a in live.actions(command_id=request.command_id) if a.status != "planned"]
    assert live.cli("recovery", "status", "--json").returncode == 0
