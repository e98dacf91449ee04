"""The controller as a process, node agents as processes, the real broker: restarts, safety limits, failover.

The training command is `fake_train.py` (step records, no maths: it starts in a blink), so these
tests are about the controller and the agents; the real torch job is in test_recovery_torch.py.
The test plays the analyzer: it publishes the incidents.
"""

from __future__ import annotations

import pytest

from tests.support.live import Live, fake_train
from tests.support.recovery_waits import cordoned, incident, training
from vigil.contract import Alert, Diagnostic

pytestmark = pytest.mark.kafka


@pytest.mark.recovery_env({"VIGIL_RECOVERY_POLICY_DIAGNOSE_HARDWARE": "false", "VIGIL_RECOVERY_RESTART_WAIT_S": "600"})
def test_controller_killed_between_cordon_and_restart_cordons_once_and_a_spare_replaces_the_host(live: Live) -> None:
    job = "job-kill"
    for h in ("h0", "h1", "h2"):
        live.start_agent(h, fake_train(python=live.python), nodes="3:3", job=job)
    live.start_controller()
    live.wait_for(training(job, 1, 3), 120, "the job to start on 3 hosts")
    inc = incident(job, "h2")
    live.publish([inc])
    # the job needs 3 hosts and has 2 left: the restart waits for one, after the cordon
    live.wait_for(lambda s: (c := s.cases.get(inc.incident_id)) is not None
                  and (r := c.step("restart", job)) is not None and r.planned_at is not None, 60,
                  "the restart to wait for a host")
    assert cordoned(live) == {"h2"}
    live.kill_controller()
    live.start_agent("h3", fake_train(python=live.python), nodes="3:3", job=job, spare=True)
    live.wait_for(lambda s: (m := s.job(job).members.get("h3")) is not None and m.state == "waiting", 60,
                  "the spare to announce itself")
    live.start_controller()
    live.wait_for(lambda s: live.outcome(inc.incident_id) is not None, 120, "the recovery to end")
    out = live.outcome(inc.incident_id)
    assert out is not None and out.result == "resumed" and out.hosts == ["h0", "h1", "h3"]
    assert out.first_step == 2000  # fake_train's first step of generation 2
    assert [(a.target, a.status) for a in live.actions(action="cordon", incident_id=inc.incident_id)] == [
        ("job-kill", "started"), ("h2", "started"), ("h2", "succeeded"), ("job-kill", "succeeded")]
    assert len(live.actions(action="restart", incident_id=inc.incident_id, status="started")) == 1
    assert live.state.job(job).members["h2"].state == "cordoned"  # its agent stays out


@pytest.mark.recovery_env({"VIGIL_RECOVERY_POLICY_DIAGNOSE_HARDWARE": "false",
                           "VIGIL_RECOVERY_BREAKER_MAX_CORDONS_PER_HOUR": "1"})
def test_circuit_breaker_acts_up_to_the_limit_then_pages_once(live: Live) -> None:
    job = "job-storm"
    for h in ("h0", "h1", "h2", "h3"):
        live.start_agent(h, fake_train(python=live.python), nodes="2:4", job=job)
    live.start_controller()
    live.wait_for(training(job, 1, 4), 120, "the job to start on 4 hosts")
    first = incident(job, "h3")
    live.publish([first])
    live.wait_for(training(job, 2, 3), 120, "the job to restart without h3")
    second, third = incident(job, "h2", tag="second"), incident(job, "h1", tag="third")
    live.publish([second])
    live.wait_for(lambda s: live.outcome(second.incident_id) is not None, 60, "the breaker to stop the recovery")
    live.publish([third])
    live.wait_for(lambda s: (c := s.cases.get(third.incident_id)) is not None and c.skipped, 60,
                  "the third fault to be skipped")
    assert cordoned(live) == {"h3"}  # no action beyond the limit
    out = live.outcome(second.incident_id)
    assert out is not None and out.result == "halted"
    pages = [e for e in live.events if isinstance(e, Alert) and e.alert == "recovery"]
    assert len(pages) == 1 and pages[0].severity == "critical" and "circuit breaker" in pages[0].summary
    assert "job halted" in live.state.cases[third.incident_id].skipped
    status = live.cli("recovery", "status", "--job", job)
    assert status.returncode == 0 and f"HALTED by {second.incident_id}" in status.stdout, status.stderr


@pytest.mark.slow
@pytest.mark.recovery_env({"VIGIL_RECOVERY_DIAGNOSTICS_ROUND_TIMEOUT_S": "90"})
def test_diagnostics_find_a_throttled_host_slow_in_both_rounds_and_its_partners_healthy(live: Live) -> None:
    job = "job-slow"
    for h in ("h0", "h1", "h2"):
        live.start_agent(h, fake_train(python=live.python), nodes="2:3", job=job,
                         env={"VIGIL_DIAG_SLOWDOWN": "8"} if h == "h1" else None)  # its GEMM test throttled
    live.start_controller()
    live.wait_for(training(job, 1, 3), 120, "the job to start")
    hang = incident(job, "h1", category="collective_hang", cause="unknown", strong=False)
    live.publish([hang])
    live.wait_for(lambda s: live.outcome(hang.incident_id) is not None, 240, "the recovery to end")
    out = live.outcome(hang.incident_id)
    assert out is not None and out.result == "resumed" and out.cordoned == ["h1"] and out.hosts == ["h0", "h2"]
    verdicts = {e.host: e for e in live.events if isinstance(e, Diagnostic) and e.test == "verdict"}
    assert verdicts["h1"].verdict == "slow", verdicts["h1"]
    assert verdicts["h1"].values["ratio_r1"] > 2 and verdicts["h1"].values["ratio_r2"] > 2  # both rounds
    assert verdicts["h0"].verdict == verdicts["h2"].verdict == "healthy"
    rounds = {a.target: a.details["groups"] for a in live.actions(action="diagnose", status="started")
              if a.target.startswith("round-")}
    assert rounds == {"round-1": [["h0", "h1", "h2"]], "round-2": [["h1", "h0"]]}  # re-paired with a healthy host
    tests = {(e.host, e.round, e.test) for e in live.events if isinstance(e, Diagnostic) and e.test != "verdict"}
    assert {("h1", r, t) for r in (1, 2) for t in ("gemm", "alltoall", "allreduce", "check")} <= tests
    assert [a.action for a in live.actions(incident_id=hang.incident_id, target=job, status="succeeded")] == [
        "dump", "pause", "diagnose", "cordon", "restart"]
