"""A real 3-host job resumes from its in-memory snapshots after a crash and after a hang: no completed step lost
either time (as the ranks' own step records show), bitwise-identical training.

Three `vigil run --nodes 2:3` agents run tests/recovery/snap_worker.py (gloo, CPU; a snapshot every
step, a persisted checkpoint every 10). h1's rank raises at the start of step 15; later h2's rank
hangs in step 22, after its backward and before the gradients' all-reduce, where its peers then
wait. The test plays the analyzer (it publishes a `crash_cascade` incident on the exit, a
`collective_hang` incident once the hung rank's peers have reported step 21 and nothing after). The
controller pauses and restarts the job on the same hosts after the crash, dumps, pauses, diagnoses
and restarts it after the hang; each time every rank restores the snapshot of the step before the
fault (14, then 21: not the checkpoints of steps 10 and 20), and the final parameters and optimizer
state hash the same as an uninterrupted run's with the same seeds, which runs standalone (torchrun,
3 local ranks) alongside. One job for both faults: the live set-up is the slow part.
"""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.live import Live
from tests.support.recovery_waits import training
from tests.support.snapshot_job import CRASH, HANG, completed_before, torchrun
from vigil.contract import Checkpoint, Incident, Outcome, ProcessExit, RankRef
from vigil.recovery.controller.state import ClusterState

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(500)]


@pytest.mark.recovery_env({"VIGIL_RECOVERY_POLICY_CORDON_SLOW": "false",
                           "VIGIL_RECOVERY_DIAGNOSTICS_ROUND_TIMEOUT_S": "90"})
def test_a_crash_and_a_hang_each_resume_from_the_snapshot_of_the_step_before_and_train_bitwise_identically(
    live: Live,
) -> None:
    job, tmp = "job-snap", live.tmp
    ref_dir = tmp / "reference"
    ref_dir.mkdir()
    ref_env = {**live.env, "VIGIL_HOME": str(ref_dir), "VIGIL_JOB_ID": "reference"}
    ref_env.pop("VIGIL_KAFKA_BOOTSTRAP", None)
    with open(ref_dir / "torchrun.log", "wb") as ref_log:
        reference = subprocess.Popen(
            torchrun("--ckpt", str(ref_dir / "ckpt"), "--snapshots", str(ref_dir / "shm"), "--out",
                     str(ref_dir / "final.sha256"), standalone=True),
            env=ref_env, stdout=ref_log, stderr=subprocess.STDOUT, cwd=ref_dir)  # fmt: skip
    try:
        shm, out_dir, once = live.writable("shm"), live.writable("out"), live.writable("once")  # the job's
        args = ["--ckpt", str(live.writable("ckpt")), "--snapshots", str(shm), "--out", str(out_dir / "final.sha256"),
                "--crash-host", "h1", "--crash-step", str(CRASH), "--once", str(once / "crash.once"),
                "--fault", f"hang:h2:{HANG}", "--once-dir", str(once)]  # fmt: skip
        for h in ("h0", "h1", "h2"):
            live.start_agent(h, torchrun(*args, python=live.python), nodes="2:3", job=job)
        live.start_controller()
        live.wait_for(training(job, 1, 3), 180, "the job to start on 3 hosts")

        reported: list[Incident] = []

        def analyzer(state: object) -> bool:
            """The crash's incident, as the analyzer would publish it."""
            if not reported:
                for e in live.events:
                    if isinstance(e, ProcessExit) and e.host == "h1" and "ValueError" in e.summary:
                        inc = Incident(job_id=job, host="h1", incident_id=f"{job}/crash_cascade/h1/g1",
                                       category="crash_cascade", cause="software", status="open",
                                       severity="critical", summary=e.summary,
                                       culprits=[RankRef(host="h1", rank=e.rank, message=e.summary)],
                                       first_sign=e.ts, detected=datetime.now(UTC))  # fmt: skip
                        live.publish([inc])
                        reported.append(inc)
            return bool(reported) and live.outcome(reported[0].incident_id) is not None

        live.wait_for(analyzer, 240, "the crash to be recovered")
        out = live.outcome(reported[0].incident_id)
        assert out is not None and out.result == "resumed", out
        assert out.hosts == ["h0", "h1", "h2"] and out.cordoned == []
        assert out.checkpoint_step == CRASH - 1 and out.first_step == CRASH and out.restore_source == "memory", out
        assert out.steps_lost == completed_before(live, job, out.resumed_at) - out.checkpoint_step == 0, out
        hang = hang_recovered(live, job, once / f"hang-h2-{HANG}.once")
        assert hang.result == "resumed" and hang.hosts == ["h0", "h1", "h2"] and hang.cordoned == [], hang
        assert hang.checkpoint_step == HANG - 1 and hang.first_step == HANG and hang.restore_source == "memory", hang
        assert hang.steps_lost == completed_before(live, job, hang.resumed_at) - hang.checkpoint_step == 0, hang
        assert [a.action for a in live.actions(incident_id=hang.incident_id, target=job, status="succeeded")] == [
            "dump", "pause", "diagnose", "cordon", "restart"]  # nothing to cordon: the diagnostics pass
        restored = {(e.host, e.step, e.source) for e in live.events if isinstance(e, Checkpoint) and e.phase == "restored"}
        assert restored == {(h, s, "memory") for h in ("h0", "h1", "h2") for s in (CRASH - 1, HANG - 1)}
        text = live.cli("recovery", "history", "--job", job).stdout
        assert f"resumed at step {CRASH} from checkpoint {CRASH - 1} (memory)" in text
        assert f"resumed at step {HANG} from checkpoint {HANG - 1} (memory)" in text

        live.wait_for(lambda s: (out_dir / "final.sha256").exists(), 180, "the resumed job to finish")
        assert reference.wait(180) == 0, (ref_dir / "torchrun.log").read_text()[-3000:]
        final, expected = (out_dir / "final.sha256").read_text(), (ref_dir / "final.sha256").read_text()
        assert len(expected) == 64 and final == expected
        assert all(len(os.listdir(shm / str(r))) == 2 for r in range(3))  # the last K=2 snapshots
    finally:
        if reference.poll() is None:
            reference.kill()
            reference.wait(30)


def hang_recovered(live: Live, job: str, fired: Path) -> Outcome:
    """Play the analyzer for the hang: once the hung rank's file says it stopped and every host's progress ends at
    the step before, publish the `collective_hang` incident; the outcome of its recovery."""
    reported: list[Incident] = []

    def analyzer(state: ClusterState) -> bool:
        if not reported and fired.exists():
            members = state.job(job).members
            if len(members) == 3 and all(m.generation == 2 and m.last_step == HANG - 1 for m in members.values()):
                onset = datetime.fromtimestamp(float(fired.read_text()), UTC)
                inc = Incident(job_id=job, host="h2", incident_id=f"{job}/collective_hang/h2/g2",
                               category="collective_hang", cause="unknown", status="open", severity="critical",
                               summary=f"h2 rank 2 stopped in step {HANG}; its peers wait in the all-reduce",
                               culprits=[RankRef(host="h2", rank=2)], confidence="weak", first_sign=onset,
                               detected=datetime.now(UTC))  # fmt: skip
                live.publish([inc])
                reported.append(inc)
        return bool(reported) and live.outcome(reported[0].incident_id) is not None

    live.wait_for(analyzer, 300, "the hang to be reported and recovered")
    out = live.outcome(reported[0].incident_id)
    assert out is not None
    return out
