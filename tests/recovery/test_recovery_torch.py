"""Real PyTorch jobs under recovery control: an Xid on one of three hosts, a user-code crash and its loop.

Each host is a `vigil run --nodes ...` agent launching torchrun with tests/recovery/job_worker.py
(DDP over gloo, `Checkpointer` every 5 steps, `StepTimer`); the controller is a `vigil recovery run`
process. The test plays the analyzer: it reads the agents' classified lines and exits from the
`logs` topic and publishes the incidents (the analyzer's incidents are wired in after the merge).
"""

from __future__ import annotations

import json
import pwd
from datetime import UTC, datetime

import pytest

from tests.support.live import Live, worker
from tests.support.recovery_waits import cordoned
from vigil.contract import Alert, Checkpoint, Incident, LogLine, Member, ProcessExit, RankRef
from vigil.recovery.controller.state import Case
from vigil.signing import KeyStore, Role

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]


def committed(live: Live, job: str) -> list[Checkpoint]:
    return [e for e in live.events if isinstance(e, Checkpoint) and e.job_id == job and e.phase == "committed"]


@pytest.mark.recovery_env({"VIGIL_RECOVERY_POLICY_CORDON_SLOW": "false",
                           "VIGIL_RECOVERY_DIAGNOSTICS_ROUND_TIMEOUT_S": "90"})
def test_xid_on_one_of_three_hosts_cordons_it_and_training_resumes_on_two_from_the_checkpoint(live: Live) -> None:
    job = "job-xid"
    args = ["--ckpt", str(live.writable("ckpt")), "--fault", "xid", "--fault-host", "h2", "--fault-step", "12",
            "--once", str(live.writable("once") / "xid.once")]
    for h in ("h0", "h1", "h2"):
        live.start_agent(h, worker(*args, python=live.python), nodes="2:3", job=job)
    live.start_controller()
    # generation 1's training is awaited in the agents' reports, not in the folded state, which may have moved on to
    # the Xid (step 12) when it is polled: an agent whose rank stopped before its control loop saw "training" reports
    # the first step with the exit instead (CI, loaded: timed out while the job had trained and checkpointed)
    live.wait_for(lambda _s: {e.host for e in live.events if isinstance(e, Member) and e.job_id == job
                              and e.generation == 1 and e.first_step is not None} == {"h0", "h1", "h2"},
                  240, "the job to train on 3 hosts")

    xid: list[LogLine] = []
    live.wait_for(lambda s: xid.extend(e for e in live.events if isinstance(e, LogLine) and e.category == "xid")
                  or xid, 120, "the Xid line of h2")
    line = xid[0]
    assert line.host == "h2" and line.xid == 79
    assert line.source == "kernel" and line.action == "reboot_then_check"  # from h2's (fake) kernel log, not stdout
    before = max(c.step for c in committed(live, job) if c.ts <= line.ts)
    inc = Incident(job_id=job, host="h2", incident_id=f"{job}/host_fault/h2/xid79", category="host_fault",
                   cause="hardware", status="open", severity="critical", summary="h2 rank 2: Xid 79, GPU fell off the bus",
                   culprits=[RankRef(host="h2", rank=2, message=line.message)], first_sign=line.ts,
                   detected=datetime.now(UTC))
    live.publish([inc])

    def recovery() -> Case | None:
        """h2's agent attests its exit with the Xid line it classified (`fault`); the incident plays the analyzer's:
        whichever the controller read first opened the recovery, the other refines it or is history."""
        return live.case(f"{job}/fault/g1/h2") or live.case(inc.incident_id)

    live.wait_for(lambda s: (c := recovery()) is not None and c.outcome is not None, 300, "the recovery to end")
    case = recovery()
    assert case is not None and case.cls == "hardware"

    out = case.outcome
    assert out is not None and out.result == "resumed", out
    assert cordoned(live) == {"h2"} and out.cordoned == ["h2"]
    assert out.hosts == ["h0", "h1"] and live.state.job(job).world == ["h0", "h1"]
    assert out.checkpoint_step is not None and out.checkpoint_step >= before  # the latest complete checkpoint
    assert out.first_step == out.checkpoint_step + 1
    restored = {(e.host, e.step) for e in live.events if isinstance(e, Checkpoint) and e.phase == "restored"}
    assert restored == {("h0", out.checkpoint_step), ("h1", out.checkpoint_step)}
    assert out.checkpoint_load_s is not None and out.total_s is not None and out.steps_lost is not None
    print(f"\nXid recovery: detect {out.detect_s} s, pause {out.pause_s} s, diagnose {out.diagnose_s} s, "
          f"restart {out.restart_s} s (checkpoint load {out.checkpoint_load_s} s), total {out.total_s} s; "
          f"{out.steps_lost} steps lost")

    history = live.cli("recovery", "history", "--job", job, "--json")
    assert history.returncode == 0, history.stderr
    (rec,) = [r for r in json.loads(history.stdout)["recoveries"] if r["id"] == case.case_id]
    steps = {(s["action"], s["target"]): s for s in rec["steps"]}
    for key in [("pause", job), ("cordon", "h2"), ("cordon", job), ("restart", job)]:
        assert steps[key]["status"] == "succeeded" and steps[key]["seconds"] is not None, key
    assert not [k for k in steps if k[0] == "diagnose"]  # the Xid names its host: no self-checks to wait for
    assert rec["outcome"]["first_step"] == out.first_step
    text = live.cli("recovery", "history", "--job", job).stdout
    assert f"resumed at step {out.first_step} from checkpoint {out.checkpoint_step}" in text and "cordoned h2" in text


@pytest.mark.recovery_env({"VIGIL_RECOVERY_POLICY_CRASH_LOOPS": "1"})
@pytest.mark.recovery_run_as("nobody")
def test_user_code_crash_restarts_without_cordon_and_a_crash_loop_stops_the_job_and_pages(live: Live) -> None:
    """The training processes run as nobody (`vigil run --user`, the agents root, each with its own host key): the
    job recovers the same, and no training process can read its agent's private key."""
    job = "job-crash"
    args = ["--ckpt", str(live.writable("ckpt")), "--step-ms", "1000", "--fault", "crash", "--fault-host", "h1", "--fault-step", "3",
            "--probe-out", str(live.writable("probes"))]
    keys = KeyStore(live.home / "keys")
    agent_keys = {h: live.home / "keys" / f"{Role.AGENT.value}.{keys.issue(h)}.key" for h in ("h0", "h1")}
    for h in ("h0", "h1"):  # crashes at step 3 every time, before the first checkpoint (step 5)
        live.start_agent(h, worker(*args, "--probe", str(agent_keys[h]), python=live.python), nodes="2:2", job=job)
    live.start_controller()
    reported: list[str] = []
    seen = [0]

    def analyzer(state: object) -> bool:
        """The crash_cascade incident of each user-code crash, as the analyzer would publish it."""
        new, seen[0] = live.events[seen[0]:], len(live.events)
        for e in new:
            if isinstance(e, ProcessExit) and e.host == "h1" and "ValueError" in e.summary:
                iid = f"{job}/crash_cascade/h1/g{live.state.job(job).generation}"  # one per generation
                if iid not in reported:
                    reported.append(iid)
                    live.publish([Incident(job_id=job, host="h1", incident_id=iid, category="crash_cascade",
                                           cause="software", status="open", severity="critical", summary=e.summary,
                                           culprits=[RankRef(host="h1", rank=e.rank, message=e.summary)],
                                           first_sign=e.ts, detected=datetime.now(UTC))])
        return any(c.outcome is not None and c.outcome.result == "halted" for c in live.state.cases.values()
                   if c.job_id == job)

    live.wait_for(analyzer, 420, "the crash loop to halt the job")
    # the second crash is one case whichever trigger opened it (our incident, or the exit once its grace ran out)
    first = reported[0]
    second = next(cid for cid, c in live.state.cases.items()
                  if c.job_id == job and c.outcome is not None and c.outcome.result == "halted")
    out1, out2 = live.outcome(first), live.outcome(second)
    assert out1 is not None and out1.result == "resumed" and out1.hosts == ["h0", "h1"]  # restarted, both hosts
    assert out1.first_step == 0 and out1.checkpoint_step is None  # nothing to resume from: step 0 again
    assert out2 is not None and out2.result == "halted"
    assert live.state.cases[second].plan == ["pause", "halt"]
    assert live.actions(action="cordon") == [] and cordoned(live) == set()
    pages = [e for e in live.events if isinstance(e, Alert) and e.alert == "recovery"]
    assert len(pages) == 1 and "restarts without checkpoint progress" in pages[0].summary
    assert all(m.state in ("waiting", "exited") for m in live.fold().job(job).members.values())  # stopped
    assert live.state.job(job).generation == 2  # and not started again
    probes = [json.loads(p.read_text()) for p in (live.tmp / "probes").glob("probe-*.json")]
    assert len(probes) >= 4  # both ranks of both generations tried
    assert all(key.read_bytes() for key in agent_keys.values())  # there to read, for root
    nobody = pwd.getpwnam("nobody").pw_uid
    assert all(p["uid"] == nobody and p["read"] == "EACCES" for p in probes), probes
