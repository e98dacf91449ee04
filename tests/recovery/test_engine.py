"""The controller's decisions against a simulated fleet: each policy, the safety limits, the modes, a restart.

Pure: the engine publishes into memory, simulated agents answer its commands (tests/support/fleet.py).
The same flows with real agents, real torch and the real broker are in test_recovery_e2e.py.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.support.fleet import T0, Fleet, Harness, incident
from vigil.contract import Alert, Command, Diagnostic, Outcome, RecoveryAction, operator_request
from vigil.recovery.controller.report import format_history, history, status

pytestmark = pytest.mark.pure
JOB = "job-a"


def started(h: Harness, hosts: int = 3) -> Harness:
    h.run(lambda: h.training(1))
    assert h.engine.state.job(JOB).world == [f"h{i}" for i in range(hosts)]
    for _ in range(3):
        h.turn()
    return h


def outcome(h: Harness, case: str) -> Outcome:
    (o,) = [e for e in h.fx.events if isinstance(e, Outcome) and e.incident_id == case]
    return o


def test_a_job_starts_once_its_agents_wait(tmp_path: Path) -> None:
    h = started(Harness.build(Fleet(job=JOB, hosts=["h0", "h1", "h2"]), tmp_path))
    starts = [e for e in h.fx.events if isinstance(e, Command) and e.action == "start"]
    assert [(c.host, c.world.node_rank if c.world else None, c.world.nnodes if c.world else None) for c in starts] == [
        ("h0", 0, 3), ("h1", 1, 3), ("h2", 2, 3)]
    assert {c.world.master_port for c in starts if c.world} == {30000}  # node rank 0's first announced port
    assert outcome(h, f"{JOB}/start/g1").result == "resumed"


def test_an_elastic_job_waits_for_nodes_max_until_the_form_wait(tmp_path: Path) -> None:
    """--nodes 2:3 with two agents waiting: no start before `form_wait_s` (the third may be on its way), then on the
    two; three waiting: at once. (It used to start as soon as every *announced* agent waited: two of three.)"""
    h = Harness.build(Fleet(job=JOB, hosts=["h0", "h1"]), tmp_path, form_wait_s=5)
    for _ in range(3):
        h.turn()
    assert not [e for e in h.fx.events if isinstance(e, Command) and e.action == "start"]
    h.run(lambda: h.training(1))
    assert h.engine.state.job(JOB).world == ["h0", "h1"] and h.now - T0 >= timedelta(seconds=5)
    full = Harness.build(Fleet(job=JOB, hosts=["h0", "h1", "h2"]), tmp_path / "full", form_wait_s=60)
    full.run(lambda: full.training(1), turns=30)
    assert full.engine.state.job(JOB).world == ["h0", "h1", "h2"]


def recovered(tmp_path: Path, *, strong: bool, **settings: object) -> tuple[Harness, str]:
    """Three hosts train; h2 crashes and a hardware incident (its culprit strong or weak) names it; trained again."""
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = started(Harness.build(fleet, tmp_path, **settings))
    h.feed(fleet.commit(10, h.now) + fleet.crash("h2", h.now))
    inc = incident(JOB, "h2", at=h.now, strong=strong)
    h.feed([inc])
    h.run(lambda: h.training(2))
    h.turn()
    return h, inc.incident_id


def test_an_explicit_hardware_fault_cordons_its_host_without_diagnostics(tmp_path: Path) -> None:
    """A strong culprit (an Xid line names its host) goes whatever a self-check says: the restart does not wait for
    a diagnostics round (policy.diagnose_explicit off, the default)."""
    h, case = recovered(tmp_path, strong=True)
    plan = h.actions(action="plan", incident_id=case)[0]
    assert plan.details["steps"] == ["pause", "cordon", "restart"]
    assert not [e for e in h.fx.events if isinstance(e, Diagnostic)]
    assert not [e for e in h.fx.events if isinstance(e, Command) and e.action == "diagnose"]
    assert set(h.fx.backend.cordoned()) == {"h2"}
    restart = [c for c in h.fx.events if isinstance(c, Command) and c.action == "start" and c.generation == 2]
    assert sorted(c.host for c in restart) == ["h0", "h1"]
    o = outcome(h, case)
    assert o.result == "resumed" and o.cordoned == ["h2"] and o.diagnose_s is None


def test_a_weak_hardware_culprit_is_diagnosed_and_kept_when_it_passes(tmp_path: Path) -> None:
    """A weak culprit (a suspicion, not an explicit error) is what the diagnostics decide: they pass, nobody goes."""
    h, case = recovered(tmp_path, strong=False)
    plan = h.actions(action="plan", incident_id=case)[0]
    assert plan.details["steps"] == ["pause", "diagnose", "cordon", "restart"]
    verdicts = {e.host: e.verdict for e in h.fx.events if isinstance(e, Diagnostic) and e.test == "verdict"}
    assert verdicts == {"h0": "healthy", "h1": "healthy", "h2": "healthy"}
    assert h.fx.backend.cordoned() == {}
    restart = [c for c in h.fx.events if isinstance(c, Command) and c.action == "start" and c.generation == 2]
    assert sorted(c.host for c in restart) == ["h0", "h1", "h2"]


def test_hardware_fault_pauses_diagnoses_cordons_and_restarts_without_the_host(tmp_path: Path) -> None:
    """policy.diagnose_explicit on: every host self-checks first, and the strong culprit goes whatever it says."""
    h, case = recovered(tmp_path, strong=True, policy_diagnose_explicit=True)
    plan = h.actions(action="plan", incident_id=case)[0]
    assert plan.details["steps"] == ["pause", "diagnose", "cordon", "restart"]
    assert [a.target for a in h.actions(action="cordon", status="succeeded", incident_id=case)] == ["h2", JOB]
    assert set(h.fx.backend.cordoned()) == {"h2"}
    restart = [c for c in h.fx.events if isinstance(c, Command) and c.action == "start" and c.generation == 2]
    assert sorted(c.host for c in restart) == ["h0", "h1"]
    verdicts = {e.host: e.verdict for e in h.fx.events if isinstance(e, Diagnostic) and e.test == "verdict"}
    assert verdicts == {"h0": "healthy", "h1": "healthy", "h2": "healthy"}  # Xid 79 is cordoned on its own say-so
    o = outcome(h, case)
    assert o.result == "resumed" and o.first_step == 11 and o.checkpoint_step == 10 and o.cordoned == ["h2"]
    assert o.hosts == ["h0", "h1"] and o.detect_s == 2.0 and o.total_s is not None and o.restart_s is not None
    doc = history(h.engine.state, h.now, JOB)
    (rec,) = [r for r in doc["recoveries"] if r["id"] == case]
    assert [(s["action"], s["target"]) for s in rec["steps"]] == [
        ("pause", JOB), ("diagnose", JOB), ("diagnose", "round-1"), ("cordon", JOB), ("cordon", "h2"),
        ("restart", JOB)]
    assert all(s["seconds"] is not None for s in rec["steps"])
    assert "resumed at step 11 from checkpoint 10" in format_history(doc)
    assert doc["jobs"][JOB]["costs"][0]["incident_id"] == case


def test_software_fault_restarts_without_cordoning(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = started(Harness.build(fleet, tmp_path))
    h.feed([*fleet.crash("h1", h.now), incident(JOB, "h1", cause="software", category="crash_cascade", at=h.now)])
    h.run(lambda: h.training(2))
    assert h.actions(action="cordon") == [] and h.fx.backend.cordoned() == {}
    assert h.engine.state.job(JOB).world == ["h0", "h1", "h2"]


def test_unexplained_exit_is_a_software_fault_after_the_grace(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = started(Harness.build(fleet, tmp_path, policy_exit_grace_s=5))
    exited = h.now
    h.feed(fleet.crash("h1", h.now))
    h.run(lambda: bool(h.actions(action="plan")[1:]), turns=10)
    plan = h.actions(action="plan")[-1]
    assert plan.incident_id == f"{JOB}/exit/g1" and plan.details["class"] == "software"
    assert plan.ts - exited >= timedelta(seconds=5)
    assert plan.details["culprits"] == [{"host": "h1", "strong": False, "rank": None, "message": "exited with exit code 1",
                                         "from_exit": True}]


def test_crash_loops_without_checkpoint_progress_stop_the_job_and_page_once(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = started(Harness.build(fleet, tmp_path, policy_crash_loops=2))
    for gen in (2, 3):  # two restarts without a checkpoint
        h.feed([*fleet.crash("h1", h.now), incident(JOB, "h1", cause="software", category="crash_cascade", at=h.now)])
        h.run(lambda gen=gen: h.training(gen))
        h.turn()
    h.feed([*fleet.crash("h1", h.now), incident(JOB, "h1", cause="software", category="crash_cascade", at=h.now)])
    h.run(lambda: any(isinstance(e, Outcome) and e.result == "halted" for e in h.fx.events))
    halted = next(e for e in h.fx.events if isinstance(e, Outcome) and e.result == "halted")
    assert h.actions(incident_id=halted.incident_id, action="plan")[0].details["steps"] == ["pause", "halt"]
    pages = [e for e in h.fx.events if isinstance(e, Alert)]
    assert len(pages) == 1 and pages[0].severity == "critical" and "without checkpoint progress" in pages[0].summary
    assert all(m.state == "waiting" for m in fleet.members.values())  # stopped
    # the job stays down: a new crash report is skipped, no second page
    h.feed([incident(JOB, "h0", cause="software", category="crash_cascade", at=h.now)])
    for _ in range(5):
        h.turn()
    assert len([e for e in h.fx.events if isinstance(e, Alert)]) == 1
    assert "job halted" in h.actions(action="plan", status="skipped")[-1].reason
    assert status(h.engine.state, h.now, {}, JOB)["jobs"][JOB]["halted_by"] == halted.incident_id


def test_a_checkpoint_resets_the_crash_loop_count(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = started(Harness.build(fleet, tmp_path, policy_crash_loops=1))
    h.feed([*fleet.crash("h1", h.now), incident(JOB, "h1", cause="software", category="crash_cascade", at=h.now)])
    h.run(lambda: h.training(2))
    h.turn()
    h.feed(fleet.commit(40, h.now))
    h.turn()
    h.feed([*fleet.crash("h1", h.now), incident(JOB, "h1", cause="software", category="crash_cascade", at=h.now)])
    h.run(lambda: h.training(3))
    assert not [e for e in h.fx.events if isinstance(e, Outcome) and e.result == "halted"]


@pytest.mark.parametrize("forged", ["unattested", "foreign host"])
def test_only_an_attested_commit_of_the_jobs_host_resets_the_crash_loop_count(tmp_path: Path, forged: str) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = started(Harness.build(fleet, tmp_path, policy_crash_loops=1))
    h.feed([*fleet.crash("h1", h.now), incident(JOB, "h1", cause="software", category="crash_cascade", at=h.now)])
    h.run(lambda: h.training(2))
    h.turn()
    claim = fleet.commit(40, h.now, attested=forged != "unattested")
    h.feed([c.model_copy(update={"host": "elsewhere"}) for c in claim] if forged == "foreign host" else claim)
    h.turn()
    h.feed([*fleet.crash("h1", h.now), incident(JOB, "h1", cause="software", category="crash_cascade", at=h.now)])
    h.run(lambda: any(isinstance(e, Outcome) and e.result == "halted" for e in h.fx.events))


def test_circuit_breaker_cordons_up_to_the_limit_then_pages_once(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2", "h3"], nodes=(1, 4, 1))
    h = started(Harness.build(fleet, tmp_path, breaker_max_cordons_per_hour=1), hosts=4)
    h.feed([*fleet.crash("h3", h.now), incident(JOB, "h3", at=h.now)])
    h.run(lambda: h.training(2))
    h.turn()
    assert set(h.fx.backend.cordoned()) == {"h3"}
    for host in ("h2", "h1"):  # two more hardware faults within the hour
        h.feed([*fleet.crash(host, h.now), incident(JOB, host, at=h.now)])
        for _ in range(20):
            h.turn()
    assert set(h.fx.backend.cordoned()) == {"h3"}  # no action beyond the limit
    pages = [e for e in h.fx.events if isinstance(e, Alert)]
    assert len(pages) == 1 and "circuit breaker" in pages[0].summary
    refused = h.actions(action="cordon", target=JOB, status="failed")
    assert len(refused) == 1 and refused[0].details["refused"] == ["h2"]
    assert not [c for c in h.fx.events if isinstance(c, Command) and c.action == "start" and c.generation == 3]


def test_at_most_a_fraction_of_a_jobs_hosts_is_cordoned(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = started(Harness.build(fleet, tmp_path))
    both = incident(JOB, "h1", at=h.now)
    both = both.model_copy(update={"culprits": [*both.culprits, both.culprits[0].model_copy(update={"host": "h2"})]})
    h.feed([*fleet.crash("h1", h.now), both])
    h.run(lambda: any(isinstance(e, Outcome) and e.incident_id == both.incident_id for e in h.fx.events))
    assert list(h.fx.backend.cordoned()) == ["h1"]  # 50% of 3 hosts: one
    assert "of the job's 3 hosts cordoned" in h.actions(action="cordon", target=JOB, status="failed")[0].reason


def test_killed_between_cordon_and_restart_a_new_controller_restarts_without_cordoning_again(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = started(Harness.build(fleet, tmp_path, die_after=lambda e: isinstance(e, RecoveryAction)
                              and e.action == "cordon" and e.target == JOB and e.status == "succeeded"))
    h.feed([*fleet.crash("h2", h.now), incident(JOB, "h2", at=h.now)])
    h.run(lambda: h.fx.dead)  # type: ignore[attr-defined]
    assert not [c for c in h.fx.events if isinstance(c, Command) and c.generation == 2]
    h2 = h.successor()
    h2.run(lambda: h2.training(2))
    assert h2.actions(action="cordon") == [] and h2.actions(action="pause") == []  # nothing redone
    assert sorted(c.host for c in h2.fx.events if isinstance(c, Command) and c.action == "start") == ["h0", "h1"]
    assert list(h2.fx.backend.cordoned()) == ["h2"]


def test_a_cordon_started_but_not_recorded_is_finished_not_repeated(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = started(Harness.build(fleet, tmp_path, die_after=lambda e: isinstance(e, RecoveryAction)
                              and e.action == "cordon" and e.target == "h2" and e.status == "started"))
    h.feed([*fleet.crash("h2", h.now), incident(JOB, "h2", at=h.now)])
    h.run(lambda: h.fx.dead)  # type: ignore[attr-defined]
    assert h.fx.backend.cordoned() == {}  # died before the backend call
    h2 = h.successor()
    h2.run(lambda: h2.training(2))
    assert [(a.target, a.status) for a in h2.actions(action="cordon")] == [("h2", "succeeded"), (JOB, "succeeded")]
    assert h2.actions(action="cordon", target="h2")[0].details["changed"] is True  # counted by the breaker
    assert list(h2.fx.backend.cordoned()) == ["h2"]


def test_a_slow_host_is_found_in_two_rounds_and_cordoned(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2", "h3"], nodes=(1, 4, 1), slow={"h1": 5.0})
    h = started(Harness.build(fleet, tmp_path), hosts=4)
    inc = incident(JOB, "h1", cause="unknown", category="collective_hang", at=h.now)
    h.feed([inc])
    h.run(lambda: h.training(2))
    h.turn()
    verdicts = {e.host: e for e in h.fx.events if isinstance(e, Diagnostic) and e.test == "verdict"}
    assert verdicts["h1"].verdict == "slow" and verdicts["h1"].values["ratio_r2"] > 2
    assert {h_ for h_, v in verdicts.items() if v.verdict == "healthy"} == {"h0", "h2", "h3"}
    rounds = {a.target: a.details for a in h.actions(action="diagnose", status="started") if a.target != JOB}
    assert rounds["round-1"]["groups"] == [["h0", "h1"], ["h2", "h3"]]
    assert rounds["round-2"]["groups"] == [["h1", "h2"]]
    assert list(h.fx.backend.cordoned()) == ["h1"]
    assert [a.action for a in h.actions(status="succeeded", incident_id=inc.incident_id, target=JOB)] == [
        "dump", "pause", "diagnose", "cordon", "restart"]


def test_dry_run_decides_and_publishes_but_does_nothing(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = started(Harness.build(fleet, tmp_path, mode="dry-run"))
    before = len([e for e in h.fx.events if isinstance(e, Command)])
    inc = incident(JOB, "h2", at=h.now)
    h.feed([*fleet.crash("h2", h.now), inc])
    for _ in range(5):
        h.turn()
    assert len([e for e in h.fx.events if isinstance(e, Command)]) == before
    planned = h.actions(incident_id=inc.incident_id)
    assert [a.action for a in planned] == ["plan", "pause", "cordon", "restart"]
    assert all(a.status == "planned" for a in planned) and all(a.dry_run for a in planned)
    assert outcome(h, inc.incident_id).result == "dry_run" and h.fx.backend.cordoned() == {}


def test_manual_mode_waits_for_approval(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = started(Harness.build(fleet, tmp_path, mode="manual"))
    inc = incident(JOB, "h2", at=h.now)
    h.feed([*fleet.crash("h2", h.now), inc])
    for _ in range(10):
        h.turn()
    assert [a.action for a in h.actions(incident_id=inc.incident_id)] == ["plan", "approve"]
    doc = status(h.engine.state, h.now, {}, JOB)
    assert doc["jobs"][JOB]["open"][0]["awaiting_approval"]
    h.feed([RecoveryAction(job_id=JOB, host="controller", ts=h.now, action="approve", target=JOB, status="succeeded",
                           incident_id=inc.incident_id, actor="user:alice")])
    h.run(lambda: h.training(2))
    assert list(h.fx.backend.cordoned()) == ["h2"]


def test_incidents_from_before_the_restart_are_history(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = started(Harness.build(fleet, tmp_path))
    first = incident(JOB, "h1", cause="software", category="crash_cascade", at=h.now)
    late = incident(JOB, "h0", cause="software", category="crash_cascade", at=h.now, iid="late-victim-report")
    h.feed([*fleet.crash("h1", h.now), first])
    h.run(lambda: h.training(2))
    h.feed([late])
    h.turn()
    h.turn()
    (skip,) = h.actions(incident_id="late-victim-report")
    assert skip.status == "skipped" and "before generation 2" in skip.reason


def test_a_hardware_incident_after_its_exit_was_recovered_as_software_recovers_again_and_cordons(tmp_path: Path) -> None:
    # the analyzer holds a crash's Xid lines to tie them to the crash: its host_fault incident may come after the
    # controller took the bare exit as a software fault and restarted with the faulty host still in the job
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = started(Harness.build(fleet, tmp_path, policy_exit_grace_s=5))
    exited = h.now
    h.feed(fleet.crash("h2", exited))
    h.run(lambda: h.training(2))
    assert h.actions(action="cordon") == [] and h.engine.state.job(JOB).world == ["h0", "h1", "h2"]
    late = incident(JOB, "h2", at=exited + timedelta(seconds=2))  # first sign = the exit
    h.feed([late])
    h.run(lambda: h.training(3))
    plan = h.actions(action="plan", incident_id=late.incident_id)[0]
    assert plan.status == "planned" and plan.details["class"] == "hardware"
    assert set(h.fx.backend.cordoned()) == {"h2"} and h.engine.state.job(JOB).world == ["h0", "h1"]
    # a victim's software report of the same failure is not stronger: history, as before
    victim = incident(JOB, "h0", cause="software", category="crash_cascade", at=exited + timedelta(seconds=3),
                      iid="victim-report")
    h.feed([victim])
    h.turn()
    h.turn()
    (skip,) = h.actions(incident_id="victim-report")
    assert skip.status == "skipped"


def test_an_operator_request_is_executed_once_and_recorded_with_who_asked(tmp_path: Path) -> None:
    """The dashboard's cordon button: a request the controller executes against its backend, once."""
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = started(Harness.build(fleet, tmp_path))
    req = operator_request(action="cordon", host="h1", job_id=JOB, reason="flaky NIC", actor="user:dashboard")
    h.feed([req])
    h.turn()
    assert list(h.fx.backend.cordoned()) == ["h1"]
    assert h.fx.backend.cordoned()["h1"].by == "user:dashboard"
    (done,) = h.actions(command_id=req.command_id)
    assert (done.action, done.target, done.status, done.actor, done.reason) == (
        "cordon", "h1", "succeeded", "user:dashboard", "flaky NIC")
    h.turn()
    assert len(h.actions(command_id=req.command_id)) == 1
    successor = h.successor()  # a new controller folds the log: the request is done, nothing is re-executed
    successor.turn()
    assert successor.actions(command_id=req.command_id) == []
    assert not h.engine.state.cordons, "an operator's cordon does not count against the circuit breaker"


def test_operator_requests_are_checked_on_the_controllers_state_and_refusals_recorded(tmp_path: Path) -> None:
    """Server-side checks: the job must exist and the host belong to it, whatever the request claims."""
    h = started(Harness.build(Fleet(job=JOB, hosts=["h0", "h1", "h2"]), tmp_path))
    reqs = [operator_request(action="cordon", host="h1", job_id="no-such-job", reason="r", actor="dashboard:eve"),
            operator_request(action="evict", host="db-primary", job_id=JOB, reason="r", actor="dashboard:eve"),
            operator_request(action="cordon", host="h2", job_id=JOB, reason="r", actor="dashboard:eve")]
    h.feed(reqs)
    h.turn()
    results = [h.actions(command_id=r.command_id) for r in reqs]
    assert [[(a.status, a.details.get("refused")) for a in r] for r in results] == [
        [("skipped", "unknown_job")], [("skipped", "host_not_in_job")], [("succeeded", None)]]
    assert list(h.fx.backend.cordoned()) == ["h2"]
    h.turn()
    assert sum(len(h.actions(command_id=r.command_id)) for r in reqs) == 3  # a refusal is a result: never retried


def test_a_signed_request_replayed_after_the_state_forgot_it_is_refused_not_executed_again(tmp_path: Path) -> None:
    """Last week's `uncordon`, re-published after compaction forgot it was done, must not undo this week's cordon:
    a request older than the state's retention is refused (`expired`), whatever the state remembers."""
    h = started(Harness.build(Fleet(job=JOB, hosts=["h0", "h1", "h2"]), tmp_path))
    req = operator_request(action="uncordon", host="h1", job_id=JOB, reason="r", actor="dashboard:eve")
    req = req.model_copy(update={"ts": h.now})
    h.feed([req])
    h.turn()
    assert [a.status for a in h.actions(command_id=req.command_id)] == ["skipped"]  # executed: nothing to undo
    h.now += timedelta(days=8)
    h.engine.state.compact(h.now)
    assert req.command_id not in h.engine.state.requests_done  # forgotten, as after a week of compaction
    h.fx.backend.cordon("h1", reason="xid", incident_id="this-week", actor="controller")
    h.engine.state._seen.clear()  # its event id long rolled out of the bounded memory of ids
    h.feed([req])
    h.turn()
    replayed = h.actions(command_id=req.command_id)[1:]
    assert [(a.status, a.details.get("refused")) for a in replayed] == [("skipped", "expired")]
    assert "h1" in h.fx.backend.cordoned()


def test_operator_requests_are_rate_limited_per_identity(tmp_path: Path) -> None:
    h = started(Harness.build(Fleet(job=JOB, hosts=["h0", "h1", "h2"]), tmp_path, requests_burst=2,
                              requests_per_minute=1))
    burst = [operator_request(action=a, host="h1", job_id=JOB, reason="r", actor="dashboard:eve")
             for a in ("cordon", "uncordon", "cordon")]
    other = operator_request(action="cordon", host="h2", job_id=JOB, reason="r", actor="dashboard:bob")
    h.feed([*burst, other])
    h.turn()
    statuses = [(a.actor, a.status, a.details.get("refused")) for r in [*burst, other]
                for a in h.actions(command_id=r.command_id)]
    assert statuses == [("dashboard:eve", "succeeded", None), ("dashboard:eve", "succeeded", None),
                        ("dashboard:eve", "skipped", "rate_limited"), ("dashboard:bob", "succeeded", None)]
    h.now += timedelta(seconds=60)  # one token back
    later = operator_request(action="cordon", host="h1", job_id=JOB, reason="r", actor="dashboard:eve")
    h.feed([later])
    h.turn()
    assert [a.status for a in h.actions(command_id=later.command_id)] == ["succeeded"]


def test_dry_run_skips_operator_requests(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1"])
    h = Harness.build(fleet, tmp_path, mode="dry-run")
    req = operator_request(action="cordon", host="h1", job_id=JOB, reason="test", actor="user:dashboard")
    h.feed([req])
    h.turn()
    assert h.fx.backend.cordoned() == {}
    (done,) = h.actions(command_id=req.command_id)
    assert done.status == "skipped" and "dry-run" in done.reason


def test_a_job_whose_command_exited_0_everywhere_finishes_once_and_every_agent_is_told(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2", "h3"])  # at most 3 nodes: h3 waits as a spare
    h = started(Harness.build(fleet, tmp_path))
    world = h.engine.state.job(JOB).world
    assert len(world) == 3 and "h3" not in world
    h.feed(fleet.crash(world[0], h.now, code=0) + fleet.crash(world[1], h.now, code=0))
    h.turn()
    assert h.actions(action="finish") == []  # one host still trains: not over
    h.feed(fleet.crash(world[2], h.now, code=0))
    for _ in range(5):
        h.turn()
    [done] = h.actions(action="finish", actor="controller")
    assert done.status == "succeeded" and done.generation == 1 and done.details["hosts"] == world
    finishes = [e for e in h.fx.events if isinstance(e, Command) and e.action == "finish"]
    assert sorted(c.host for c in finishes) == ["h0", "h1", "h2", "h3"]  # the spare too, each once
    assert {m.state for m in fleet.members.values()} == {"left"}
    assert not [e for e in h.fx.events if isinstance(e, Command) and e.action == "start" and e.generation > 1]
    successor = h.successor()  # rebuilt from the log: finished, nothing sent again
    successor.turn()
    assert successor.engine.state.job(JOB).finished is not None and successor.fx.events == []


def test_a_reused_job_id_is_a_new_run_and_a_replayed_finish_ends_no_later_run(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = started(Harness.build(fleet, tmp_path))
    h.feed([e for host in h.engine.state.job(JOB).world for e in fleet.crash(host, h.now, code=0)])
    h.run(lambda: {m.state for m in fleet.members.values()} == {"left"})
    [done] = h.actions(action="finish", actor="controller")
    h.now += timedelta(minutes=5)  # the same job id submitted again: new agents wait, in no generation
    fresh = {"generation": 0, "node_rank": None, "started_at": None, "first_step": None, "first_step_at": None,
             "last_step": None, "last_step_at": None, "steps": 0, "exit_code": None}
    h.feed([fleet.member(host, "waiting", h.now, **fresh) for host in fleet.hosts])
    h.run(lambda: h.training(2))
    finishes = [c for c in h.fx.events if isinstance(c, Command) and c.action == "finish"]
    assert len(finishes) == 3 and all(c.generation == 1 for c in finishes)  # none told to the new run's agents
    h.engine.state._seen.clear()  # its id long out of the bounded memory of ids
    h.feed([done])  # the old signed finish, re-published
    for _ in range(3):
        h.turn()
    assert h.engine.state.job(JOB).finished is None and h.training(2)
    assert len([c for c in h.fx.events if isinstance(c, Command) and c.action == "finish"]) == 3


def test_a_host_that_exits_0_while_others_fail_is_not_a_finished_job(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = started(Harness.build(fleet, tmp_path))
    h.feed(fleet.crash("h0", h.now, code=0) + fleet.crash("h1", h.now, code=1) + fleet.crash("h2", h.now, code=0))
    for _ in range(5):
        h.turn()
    assert h.actions(action="finish") == []


def test_a_restart_whose_generation_trains_to_the_end_before_a_step_is_read_resumed_and_the_job_finishes(
        tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = started(Harness.build(fleet, tmp_path))
    fleet.commit(20, h.now)
    fleet.finish_on_start = True  # the few steps left run before any member report says "training"
    h.feed([*fleet.crash("h1", h.now), incident(JOB, "h1", cause="software", category="crash_cascade", at=h.now)])
    for _ in range(20):
        h.turn()
    [restart] = h.actions(action="restart", status="succeeded")
    assert restart.details["ended"] == ["h0", "h1", "h2"] and restart.details["first_step"] == 21
    assert not h.actions(action="restart", status="failed")
    [o] = [e for e in h.fx.events if isinstance(e, Outcome) and e.category != "start"]
    assert o.result == "resumed" and o.first_step == 21
    [done] = h.actions(action="finish", actor="controller")
    assert done.generation == 2


def test_a_restart_where_hosts_finish_but_one_exits_before_a_step_did_not_come_up(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = started(Harness.build(fleet, tmp_path))
    fleet.finish_on_start, fleet.start_exit = True, {"h2": 1}  # h0, h1 train to the end; h2's command fails at once
    h.feed([*fleet.crash("h1", h.now), incident(JOB, "h1", cause="software", category="crash_cascade", at=h.now)])
    h.run(lambda: bool(h.actions(action="restart", status="failed")))
    assert not h.actions(action="restart", status="succeeded")
    [failed] = h.actions(action="restart", status="failed")[:1]
    assert failed.reason == "generation 2 did not come up: h2 exited", failed.reason


def test_a_restart_whose_hosts_trained_then_crashed_came_up_and_the_crash_is_a_case_of_its_own(
        tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1"], nodes=(2, 2, 1))
    h = started(Harness.build(fleet, tmp_path), hosts=2)
    h.feed([*fleet.crash("h1", h.now), incident(JOB, "h1", cause="software", category="crash_cascade", at=h.now)])
    h.run(lambda: any(m.generation == 2 for m in fleet.members.values()))  # started; first steps queued
    h.feed(fleet.react([], h.now))  # the hosts report their first step, and before the controller's turn
    h.feed(fleet.crash("h1", h.now))  # h1 crashes again
    assert h.engine.state.job(JOB).members["h1"].state == "exited"
    h.run(lambda: bool(h.actions(action="restart", status="succeeded")))
    [restart] = h.actions(action="restart", status="succeeded")[:1]
    assert restart.generation == 2 and restart.details["ended"] == ["h1"]
    h.feed([incident(JOB, "h1", cause="software", category="crash_cascade", at=h.now)])
    h.run(lambda: h.engine.state.job(JOB).generation == 3)  # the second crash: recovered again


def test_keep_alives_do_not_accumulate_in_the_controller_state(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = started(Harness.build(fleet, tmp_path))
    held = len(h.engine.state._seen)
    for _ in range(50):
        h.feed(fleet.train(h.now))  # a keep-alive of every agent
        h.now += timedelta(seconds=10)
    assert len(h.engine.state._seen) == held
    assert h.engine.state.job(JOB).members["h0"].ts == fleet.members["h0"].ts  # still folded: the latest


def test_without_diagnostics_every_hardware_culprit_but_an_exits_victim_goes(tmp_path: Path) -> None:
    """policy.diagnose_hardware off: a strong culprit and a weak suspect no exit named both go; a weak culprit only
    an exit named, beside the strong one, is its victim and stays."""
    from types import SimpleNamespace

    from vigil.recovery.controller.state import Case
    from vigil.recovery.controller.steps import condemned

    h, case = recovered(tmp_path, strong=True, policy_diagnose_hardware=False)
    plan = h.engine.state.cases[case].details["steps"]
    assert "diagnose" not in plan
    culprits = [{"host": "h2", "strong": True}, {"host": "h1", "strong": False},
                {"host": "h0", "strong": False, "from_exit": True}]
    mixed = Case(case_id="mixed", job_id=JOB, details={"class": "hardware", "steps": plan, "culprits": culprits})
    assert condemned(SimpleNamespace(settings=h.engine.settings, state=h.engine.state), mixed) == ["h2", "h1"]  # type: ignore[arg-type]
