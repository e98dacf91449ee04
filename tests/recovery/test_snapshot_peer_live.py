"""A real 3-host job loses a host to an Xid and resumes from the lost host's snapshot held by its buddy.

Three `vigil run --nodes 3:3` agents (h0, h1, h2) run tests/recovery/snap_worker.py (gloo, CPU; a
snapshot every step into the agent's host memory `<root>/<host>/<job>`, a persisted checkpoint every
10). Each agent copies its rank's new snapshots to the next host in the ring (h1's go to h2). At the
start of step 15 h1's rank prints an Xid 79 line and dies of a CUDA error. The test plays the
analyzer (a hardware incident on the Xid line): the controller pauses the job and cordons h1; the
host is then lost — its agent stopped, its memory wiped — and a spare h3 joins. The new world is
h0, h2, h3: rank 0 restores its own snapshot of step 14, rank 1 (now on h2) the copy h2 holds of
h1's, rank 2 (now on h3) the copy h3's agent staged from the new world's other hosts. Nothing is
lost beyond the step in flight, and the final parameters and optimizer state hash the same as an
uninterrupted run's (torchrun standalone, 3 local ranks). The agents' member reports carry their
replication counters: h1's pushes up to step 14 to h2, h3's staged copies.
"""

from __future__ import annotations

import shutil
import subprocess
from datetime import UTC, datetime

import pytest

from tests.support.live import Live
from tests.support.recovery_waits import cordoned, training
from tests.support.snapshot_job import completed_before, torchrun
from vigil.contract import Checkpoint, Incident, LogLine, Member, RankRef
from vigil.recovery.controller.state import Case

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(420)]
XID = 15
JOB = "job-buddy"


def test_an_xid_with_host_loss_resumes_from_the_buddys_copy_and_trains_bitwise_identically(live: Live) -> None:
    tmp = live.tmp
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
        shm = tmp / "shm"
        memory = {"VIGIL_SNAPSHOT_ROOT": str(shm)}  # each host's memory: shm/<host>/<job>
        out_dir = live.writable("out")  # what the job writes is its own (vigil run --user); the agents own shm
        args = ["--ckpt", str(live.writable("ckpt")), "--out", str(out_dir / "final.sha256"), "--crash-host", "h1",
                "--crash-step", str(XID), "--xid", "--once", str(live.writable("once") / "xid.once")]  # fmt: skip
        for h in ("h0", "h1", "h2"):
            live.start_agent(h, torchrun(*args, python=live.python), nodes="3:3", job=JOB, env=memory)
        live.start_controller()
        live.wait_for(training(JOB, 1, 3), 180, "the job to start on 3 hosts")

        reported: list[Incident] = []

        def recovery() -> Case | None:
            """The recovery of the Xid: h1's agent attests its exit with the Xid line it classified (`fault`), this
            test's incident plays the analyzer's; whichever the controller read first opened it, the other refines it
            or is history."""
            return live.case(f"{JOB}/fault/g1/h1") or (live.case(reported[0].incident_id) if reported else None)

        def analyzer(state: object) -> bool:
            """The Xid's incident, as the analyzer would publish it; then the restart waits for a host."""
            if not reported:
                for e in live.events:
                    if isinstance(e, LogLine) and e.host == "h1" and e.category == "xid":
                        inc = Incident(job_id=JOB, host="h1", incident_id=f"{JOB}/host_fault/h1/g1",
                                       category="host_fault", cause="hardware", status="open", severity="critical",
                                       summary=e.message, culprits=[RankRef(host="h1", rank=1, message=e.message)],
                                       first_sign=e.ts, detected=datetime.now(UTC))  # fmt: skip
                        live.publish([inc])
                        reported.append(inc)
            case = recovery()
            restart = case.step("restart", JOB) if case is not None else None
            return restart is not None and restart.planned_at is not None

        live.wait_for(analyzer, 240, "the Xid to be handled up to the restart, which waits for a host")
        assert cordoned(live) == {"h1"}
        # h1 is lost: its agent goes, and its memory with it (nothing on h1 can serve the restore)
        live.agents["h1"].terminate()
        live.agents["h1"].wait(60)
        assert (shm / "h2" / JOB / "peer" / "1").is_dir()  # h1's snapshots were copied to its buddy before
        shutil.rmtree(shm / "h1")
        live.start_agent("h3", torchrun(*args, python=live.python), nodes="3:3", job=JOB, env=memory, spare=True)
        live.wait_for(lambda s: (c := recovery()) is not None and c.outcome is not None, 240, "the recovery to end")

        case = recovery()
        out = case.outcome if case is not None else None
        assert out is not None and out.result == "resumed", out
        assert out.hosts == ["h0", "h2", "h3"] and out.cordoned == ["h1"], out
        assert out.checkpoint_step == XID - 1 and out.first_step == XID and out.restore_source == "peer", out
        # steps lost counted exactly, as the ranks' own step records show: completed before the fault - restored
        completed = completed_before(live, JOB, out.resumed_at)
        assert completed == XID - 1 and out.last_step == completed, (completed, out)
        assert out.steps_lost == completed - out.checkpoint_step, out
        restored = {(e.host, e.step, e.source) for e in live.events if isinstance(e, Checkpoint) and e.phase == "restored"}
        assert restored == {("h0", XID - 1, "memory"), ("h2", XID - 1, "peer"), ("h3", XID - 1, "peer")}
        text = live.cli("recovery", "history", "--job", JOB).stdout
        assert f"resumed at step {XID} from checkpoint {XID - 1} (peer)" in text
        # the agents' replication counters reach the log in their member reports (the newest of each host)
        reps = {e.host: e.replication for e in live.events if isinstance(e, Member) and e.replication is not None}
        assert reps["h1"].buddy == "h2" and reps["h1"].last_step == XID - 1 and reps["h1"].pushed >= 2, reps["h1"]
        # an older snapshot pruned (K=2) while being read is an `io` refusal, retried while still held: never another
        assert reps["h1"].pushed_bytes > 0 and set(reps["h1"].refused) <= {"io"}, reps["h1"]
        assert reps["h3"].staged >= 1 and reps["h3"].staged_bytes > 0 and reps["h3"].buddy == "h0", reps["h3"]

        live.wait_for(lambda s: (out_dir / "final.sha256").exists(), 180, "the resumed job to finish")
        assert reference.wait(180) == 0, (ref_dir / "torchrun.log").read_text()[-3000:]
        final, expected = (out_dir / "final.sha256").read_text(), (ref_dir / "final.sha256").read_text()
        assert len(expected) == 64 and final == expected
        assert not (shm / "h1").exists()
    finally:
        if reference.poll() is None:
            reference.kill()
            reference.wait(30)
