"""A real 3-host job resumes from its in-memory snapshots: at most one step lost, bitwise-identical training.

Three `vigil run --nodes 2:3` agents run tests/recovery/snap_worker.py (gloo, CPU; a snapshot every
step, a persisted checkpoint every 10); h1's rank raises at the start of step 15. The test plays the
analyzer (it publishes the crash incident); the controller pauses and restarts the job on the same
hosts, every rank restores the snapshot of step 14 (not the checkpoint of step 10), and the final
parameters and optimizer state hash the same as an uninterrupted run's with the same seeds, which
runs standalone (torchrun, 3 local ranks) alongside.
"""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime

import pytest
from live import HERE, PY, Live
from test_recovery_live import training

from vigil.contract import Checkpoint, Incident, ProcessExit, RankRef

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(400)]
STEPS, CRASH = 24, 15


def torchrun(*args: str, standalone: bool = False) -> list[str]:
    nproc = ["--standalone", "--nproc-per-node", "3"] if standalone else ["--nproc-per-node", "1"]
    return [PY, "-m", "torch.distributed.run", *nproc, str(HERE / "snap_worker.py"), "--steps", str(STEPS), *args]


def test_a_rank_crash_resumes_from_the_snapshot_of_the_step_before_and_trains_bitwise_identically(
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
        args = ["--ckpt", str(tmp / "ckpt"), "--snapshots", str(tmp / "shm"), "--out", str(tmp / "final.sha256"),
                "--crash-host", "h1", "--crash-step", str(CRASH), "--once", str(tmp / "crash.once")]  # fmt: skip
        for h in ("h0", "h1", "h2"):
            live.start_agent(h, torchrun(*args), nodes="2:3", job=job)
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
        assert out.steps_lost is not None and out.steps_lost <= 1
        restored = {(e.host, e.step, e.source) for e in live.events if isinstance(e, Checkpoint) and e.phase == "restored"}
        assert restored == {(h, CRASH - 1, "memory") for h in ("h0", "h1", "h2")}
        text = live.cli("recovery", "history", "--job", job).stdout
        assert f"resumed at step {CRASH} from checkpoint {CRASH - 1} (memory)" in text

        live.wait_for(lambda s: (tmp / "final.sha256").exists(), 180, "the resumed job to finish")
        assert reference.wait(180) == 0, (ref_dir / "torchrun.log").read_text()[-3000:]
        final, expected = (tmp / "final.sha256").read_text(), (ref_dir / "final.sha256").read_text()
        assert len(expected) == 64 and final == expected
        assert all(len(os.listdir(tmp / "shm" / str(r))) == 2 for r in range(3))  # the last K=2 snapshots
    finally:
        if reference.poll() is None:
            reference.kill()
            reference.wait(30)
