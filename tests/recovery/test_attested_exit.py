"""Deciding at the agent's speed: an exit its agent attested opens a case at once, the analyzer's verdict refines it.

Pure: the engine against the simulated fleet (tests/support/fleet.py) with the default settle window (2 s)
and exit grace (30 s); the members are sealed with their host's real agent key, and the controller's
gate refuses an unattested member or ack and one attested by another host's key. The same path with
real agents and torch: test_snapshot_recovery.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.support.fleet import Fleet, Harness, incident
from vigil.contract import Command, Event, Member, Outcome, RecoveryAction
from vigil.contract.xid import XidAction
from vigil.signing import KeyStore, Role
from vigil.signing.gate import Gate
from vigil.signing.policy import Refusals
from vigil.signing.seal import Ed25519Signer, KeyRing, Problem

pytestmark = pytest.mark.pure
JOB = "job-a"


def agent_key(tmp: Path, host: str, role: Role = Role.AGENT) -> Ed25519Signer:
    """`host`'s own agent key (or, with `role`, a service's)."""
    store = KeyStore(tmp / "keys")
    store.ensure()
    for h in ("h0", "h1", "h2"):
        store.issue(h)
    kid, key = store.private_key(role, host if role is Role.AGENT else "")
    return Ed25519Signer(role=role, key_id=kid, key=key)


def attested_crash(fleet: Fleet, host: str, now: datetime, key: Ed25519Signer) -> list[Event]:
    (m,) = fleet.crash(host, now)
    assert isinstance(m, Member)
    sealed = key.seal(m)
    fleet.members[host] = sealed
    return [sealed]


def running(tmp: Path, **settings: object) -> tuple[Fleet, Harness]:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = Harness.build(fleet, tmp, policy_settle_s=2.0, **settings)
    h.run(lambda: h.training(1))
    for _ in range(3):
        h.turn()
    return fleet, h


def test_an_attested_exit_opens_its_case_in_the_turn_that_reads_it(tmp_path: Path) -> None:
    fleet, h = running(tmp_path)
    exited = h.now
    h.feed(attested_crash(fleet, "h1", h.now, agent_key(tmp_path, "h1")))
    h.turn()
    (plan,) = h.actions(action="plan", incident_id=f"{JOB}/exit/g1")
    assert plan.ts == exited and plan.details["class"] == "software" and plan.details["source"] == "exit"
    assert "attested by its agent" in plan.details["summary"]
    assert [c.host for c in h.fx.events if isinstance(c, Command) and c.action == "stop"] == ["h0", "h1", "h2"]


def test_an_unattested_exit_still_waits_for_the_analyzer(tmp_path: Path) -> None:
    fleet, h = running(tmp_path, policy_exit_grace_s=5)
    exited = h.now
    h.feed(fleet.crash("h1", h.now))
    h.run(lambda: bool(h.actions(action="plan", incident_id=f"{JOB}/exit/g1")), turns=20)
    (plan,) = h.actions(action="plan", incident_id=f"{JOB}/exit/g1")
    assert plan.ts - exited >= timedelta(seconds=5 + 2)  # the grace, then the settle window


def test_a_hardware_verdict_during_the_pause_refines_the_case_to_a_cordon(tmp_path: Path) -> None:
    """The crash is reported first (software: pause, restart); the Xid incident lands while the pause runs:
    the same case goes on as hardware (cordon h2 on the Xid's say-so, restart on two), one recovery, one outcome."""
    fleet, h = running(tmp_path)
    h.feed(fleet.commit(10, h.now) + attested_crash(fleet, "h2", h.now, agent_key(tmp_path, "h2")))
    h.turn()
    case = f"{JOB}/exit/g1"
    assert h.actions(action="pause", status="started", incident_id=case)
    inc = incident(JOB, "h2", at=h.now)
    h.feed([inc])
    h.run(lambda: h.training(2))
    h.turn()
    plans = h.actions(action="plan", incident_id=case)
    assert [p.details["class"] for p in plans] == ["software", "hardware"]
    assert plans[1].details["steps"] == ["pause", "cordon", "restart"]  # an explicit culprit: no diagnostics
    assert plans[1].details["refined_by"] == [inc.incident_id]
    assert plans[1].details["culprits"] == [{"host": "h2", "strong": True, "rank": 0, "message": "Xid 79",
                                             "from_exit": False}]  # the exit named it too: not only the exit
    assert set(h.fx.backend.cordoned()) == {"h2"}
    assert sorted(c.host for c in h.fx.events if isinstance(c, Command) and c.action == "start"
                  and c.generation == 2) == ["h0", "h1"]
    outcomes = [e for e in h.fx.events if isinstance(e, Outcome) and e.incident_id != f"{JOB}/start/g1"]
    assert [(o.incident_id, o.result, o.cordoned) for o in outcomes] == [(case, "resumed", ["h2"])]
    assert not h.actions(incident_id=inc.incident_id)  # never a case, nor skipped: it refined the exit's
    folded = h.successor().engine.state  # the refinement is in the log: a new leader sees the same case
    assert folded.cases[case].cls == "hardware" and folded.merged[inc.incident_id] == case


def test_a_verdict_after_the_restart_began_is_the_next_case_not_a_refinement(tmp_path: Path) -> None:
    fleet, h = running(tmp_path)
    h.feed(fleet.commit(10, h.now) + attested_crash(fleet, "h2", h.now, agent_key(tmp_path, "h2")))
    h.run(lambda: bool(h.actions(action="restart", status="started")))
    inc = incident(JOB, "h2", at=h.now - timedelta(seconds=1))
    h.feed([inc])
    h.run(lambda: any(isinstance(e, Outcome) and e.incident_id == inc.incident_id for e in h.fx.events), turns=60)
    assert [p.details["class"] for p in h.actions(action="plan", incident_id=f"{JOB}/exit/g1")] == ["software"]
    assert h.actions(action="plan", incident_id=inc.incident_id)[0].details["class"] == "hardware"  # escalated
    assert set(h.fx.backend.cordoned()) == {"h2"}


def test_a_late_crash_verdict_of_unknown_cause_is_the_crashs_echo_not_a_second_recovery(tmp_path: Path) -> None:
    """A host killed outright: its agent's attested exit was recovered as software; the analyzer's
    `crash_cascade` (no traceback: cause unknown, handled as a hang) lands after the restart began. It is
    history, not a stronger verdict: one failure, one recovery, nobody cordoned."""
    fleet, h = running(tmp_path)
    h.feed(fleet.commit(10, h.now) + attested_crash(fleet, "h2", h.now, agent_key(tmp_path, "h2")))
    h.run(lambda: h.training(2))
    inc = incident(JOB, "h2", cause="unknown", category="crash_cascade", at=h.now - timedelta(seconds=3))
    h.feed([inc])
    h.run(lambda: bool(h.actions(incident_id=inc.incident_id)), turns=10)
    (skipped,) = h.actions(incident_id=inc.incident_id)
    assert skipped.action == "plan" and skipped.status == "skipped" and "already recovered" in skipped.reason
    assert h.fx.backend.cordoned() == {} and h.engine.state.job(JOB).generation == 2


def test_the_gate_refuses_a_forged_attestation_and_admits_the_agents(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0"])
    (m,) = fleet.crash("h0", datetime.now().astimezone())
    assert isinstance(m, Member)
    gate = Gate(verifier=KeyRing(load=KeyStore(tmp_path / "keys").public_keys, reload_s=0),
                refusals=Refusals(reporter="controller"))
    good = agent_key(tmp_path, "h0").seal(m)
    wrong_role = agent_key(tmp_path, "h0", Role.ANALYZER).seal(m)
    other_host = agent_key(tmp_path, "h1").seal(m)  # a real agent's key, speaking for a host not its own
    tampered = good.model_copy(update={"host": "h9"})
    finish = RecoveryAction(job_id=JOB, host="h0", ts=good.ts, action="finish", target="h0", status="succeeded",
                            command_id=f"{JOB}/g1/finish/h0", actor="agent:h0")  # an agent's ack: a fact that decides
    acked = agent_key(tmp_path, "h0").seal(finish)
    accepted, alerts = gate.admit([m, good, wrong_role, other_host, tampered, finish, acked], good.ts)
    assert accepted == [good, acked]  # only what h0's own key attests
    # one alert per kind, job and host: the member of h0 (unattested first), h9's, h0's unattested ack
    assert [(a.subject, a.host, a.evidence["problem"]) for a in alerts] == [
        ("member", "h0", Problem.UNATTESTED.value), ("member", "h9", Problem.BAD_SIGNATURE.value),
        ("recovery/finish", "h0", Problem.UNATTESTED.value)]
    assert gate.refused == 5


def xid_exit(fleet: Fleet, host: str, now: datetime) -> Member:
    return fleet.member(host, "exited", now, exit_code=1, fault="xid",
                        reason="xid error: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus; then the "
                               "command exited with status 1")


def test_an_attested_xid_exit_is_one_recovery_that_cordons_its_host_at_once(tmp_path: Path) -> None:
    """A peer's exit reaches the controller first (software: the pause starts); the Xid host's agent then reports
    its exit with the Xid line it classified: the same case goes on as hardware, cordons that host without
    diagnostics and restarts on the other two. The analyzer's host_fault incident, later, is the same failure."""
    fleet, h = running(tmp_path)
    h.feed(fleet.commit(10, h.now) + attested_crash(fleet, "h0", h.now, agent_key(tmp_path, "h0")))
    h.turn()
    case = f"{JOB}/exit/g1"
    assert h.actions(action="pause", status="started", incident_id=case)
    xid_at = h.now
    h.feed([agent_key(tmp_path, "h2").seal(xid_exit(fleet, "h2", xid_at))])
    h.turn()
    plans = h.actions(action="plan", incident_id=case)
    assert [p.details["class"] for p in plans] == ["software", "hardware"]
    assert plans[1].details["steps"] == ["pause", "cordon", "restart"]
    assert plans[1].details["refined_by"] == [f"{JOB}/fault/g1/h2"]
    h.run(lambda: any(isinstance(e, Outcome) and e.incident_id == case for e in h.fx.events), turns=60)
    assert set(h.fx.backend.cordoned()) == {"h2"}  # the victim h0 stays
    assert sorted(c.host for c in h.fx.events if isinstance(c, Command) and c.action == "start"
                  and c.generation == 2) == ["h0", "h1"]
    assert not [c for c in h.fx.events if isinstance(c, Command) and c.action == "diagnose"]
    outcomes = [e for e in h.fx.events if isinstance(e, Outcome) and e.incident_id != f"{JOB}/start/g1"]
    assert [(o.incident_id, o.result, o.cordoned) for o in outcomes] == [(case, "resumed", ["h2"])]
    late = incident(JOB, "h2", at=xid_at)  # its first sign: the Xid line, printed before the exit
    h.feed([late])
    h.run(lambda: bool(h.actions(incident_id=late.incident_id)), turns=10)
    assert [a.status for a in h.actions(incident_id=late.incident_id)] == ["skipped"]  # not a second restart
    assert h.engine.state.job(JOB).generation == 2


def test_an_attested_xid_exit_alone_opens_a_hardware_recovery(tmp_path: Path) -> None:
    fleet, h = running(tmp_path)
    h.feed([*fleet.commit(10, h.now), agent_key(tmp_path, "h1").seal(xid_exit(fleet, "h1", h.now))])
    h.turn()
    plans = h.actions(action="plan", incident_id=f"{JOB}/fault/g1/h1")
    assert [(p.details["class"], p.details["steps"]) for p in plans] == [("hardware", ["pause", "cordon", "restart"])]
    assert plans[0].details["culprits"][0]["host"] == "h1" and plans[0].details["culprits"][0]["strong"]
    assert plans[0].details["summary"].startswith("h1 exited with exit code 1 (attested by its agent): xid error: "
                                                  "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus")
    h.run(lambda: h.training(2))
    assert set(h.fx.backend.cordoned()) == {"h1"}


def test_an_unattested_fault_claim_takes_no_host_out(tmp_path: Path) -> None:
    """Anyone can write an unsigned member to the topic: its `fault` is a plain fact, the exit the slow path's."""
    fleet, h = running(tmp_path, policy_exit_grace_s=5)
    h.feed([*fleet.commit(10, h.now), xid_exit(fleet, "h1", h.now)])
    h.run(lambda: h.training(2), turns=60)
    assert not h.actions(incident_id=f"{JOB}/fault/g1/h1")
    assert h.actions(action="plan", incident_id=f"{JOB}/exit/g1")[0].details["class"] == "software"
    assert h.fx.backend.cordoned() == {}


def test_a_suspect_beside_the_xid_host_is_diagnosed_not_spared(tmp_path: Path) -> None:
    """A weak culprit that no exit named (a lost heartbeat's host) beside the Xid host is a suspect, not a victim:
    the recovery runs the diagnostics, which judge it (here: its agent answers, healthy), and the Xid host goes."""
    fleet, h = running(tmp_path)
    h.feed(fleet.commit(10, h.now))
    t = h.now
    h.feed([agent_key(tmp_path, "h1").seal(xid_exit(fleet, "h1", t)),
            incident(JOB, "h2", at=t, strong=False, category="host_fault")])
    h.run(lambda: bool(h.actions(action="diagnose", status="succeeded")), turns=60)
    plans = h.actions(action="plan")
    hardware = [p for p in plans if p.details.get("class") == "hardware"]
    assert hardware and hardware[-1].details["steps"] == ["pause", "diagnose", "cordon", "restart"], \
        [(p.incident_id, p.details.get("steps")) for p in plans]
    h.run(lambda: h.training(2), turns=60)
    assert set(h.fx.backend.cordoned()) == {"h1"}


def test_an_attested_fault_the_policy_does_not_take_as_hardware_is_an_exit(tmp_path: Path) -> None:
    """An operator who took `error_log:xid` out of `policy.alert_triggers` (users print such lines) gets no cordon
    from the agent's report of one either: the exit is recovered as software."""
    triggers = {"error_log:ecc": "hardware", "heartbeat_loss": "hardware"}
    fleet, h = running(tmp_path, policy_alert_triggers=triggers)
    h.feed([*fleet.commit(10, h.now), agent_key(tmp_path, "h1").seal(xid_exit(fleet, "h1", h.now))])
    h.run(lambda: h.training(2), turns=60)
    assert not h.actions(incident_id=f"{JOB}/fault/g1/h1")
    assert h.actions(action="plan", incident_id=f"{JOB}/exit/g1")[0].details["class"] == "software"
    assert h.fx.backend.cordoned() == {}


def gpu_lost_exit(fleet: Fleet, host: str, now: datetime) -> Member:
    return fleet.member(host, "exited", now, exit_code=1, fault="gpu_lost", fault_gpus=[1],
                        fault_action=XidAction.REBOOT_THEN_CHECK,
                        reason="gpu_lost: NVML: the GPU is gone from the device list; then the command exited with "
                               "status 1")


def test_an_attested_gpu_lost_exit_is_a_hardware_case_that_cordons(tmp_path: Path) -> None:
    """A GPU gone from NVML (its agent attests `Member.fault` gpu_lost, the catalog's reboot_then_check): one
    hardware recovery at once that cordons the host (a lost GPU is no GPU to quarantine) and restarts on the
    others, not the slow path's software restart."""
    fleet, h = running(tmp_path)
    h.feed([*fleet.commit(10, h.now), agent_key(tmp_path, "h1").seal(gpu_lost_exit(fleet, "h1", h.now))])
    h.turn()
    plans = h.actions(action="plan", incident_id=f"{JOB}/fault/g1/h1")
    assert [(p.details["class"], p.details["steps"]) for p in plans] == [("hardware", ["pause", "cordon", "restart"])]
    assert plans[0].details["culprits"][0]["host"] == "h1" and plans[0].details["culprits"][0]["strong"]
    h.run(lambda: h.training(2))
    assert set(h.fx.backend.cordoned()) == {"h1"}
    assert not h.actions(action="quarantine")
    assert sorted(h.engine.state.job(JOB).world) == ["h0", "h2"]
    assert not h.actions(incident_id=f"{JOB}/exit/g1", action="plan")  # no second, software case
