"""The Slurm backend against a real Slurm: munged, slurmctld and three slurmd on this machine (tests/support/slurm_cluster.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.recovery.relaunch_harness import allocation_ends, outcomes
from tests.recovery.relaunch_harness import harness as relaunch_harness
from tests.support.slurm_cluster import SlurmCluster
from tests.support.waiting import wait_until
from vigil.recovery.backends.slurm import SlurmBackend, SlurmSettings, SubprocessCli
from vigil.recovery.backends.slurm.allocation import Allocation, hostnames, relaunch_argv, running

pytestmark = pytest.mark.slurm


def backend(slurm: SlurmCluster) -> SlurmBackend:
    return SlurmBackend(SlurmSettings(conf=str(slurm.conf), read_interval_s=0))


def reason_of(slurm: SlurmCluster, node: str) -> str:
    line = slurm.run("scontrol", "show", "node", "-o", node)
    return re.sub(r" \[\S+@\S+\]$", "", line.split(" Reason=", 1)[1].strip()) if " Reason=" in line else ""


def test_drain_resume_and_an_external_drain(slurm: SlurmCluster) -> None:
    b = backend(slurm)
    change = b.cordon("n2", reason="hardware fault: Xid 79 on rank 3", incident_id="job/inc-1", actor="controller")
    assert change.changed
    assert reason_of(slurm, "n2") == "vigil: job/inc-1 hardware fault: Xid 79 on rank 3"
    assert slurm.states()["n2"] == "drained"
    assert not b.cordon("n2", reason="again", incident_id="job/inc-2", actor="controller").changed
    slurm.run("scontrol", "update", "nodename=n3", "state=drain", "reason=hw check by ops")

    held = b.cordoned()
    assert set(held) == {"n2"}  # only vigil's
    assert (held["n2"].incident_id, held["n2"].by) == ("job/inc-1", "root") and held["n2"].at.endswith("Z")
    assert b.drained()["n3"].reason == "hw check by ops"  # the external drain, read as evidence

    external = b.uncordon("n3", reason="looks fine", actor="user:alice")
    assert not external.changed and "hw check by ops" in external.detail
    assert reason_of(slurm, "n3") == "hw check by ops" and slurm.states()["n3"] == "drained"
    assert not b.cordon("n3", reason="x", incident_id="job/inc-3", actor="controller").changed
    assert reason_of(slurm, "n3") == "hw check by ops"  # never overwritten

    resumed = b.uncordon("n2", reason="repaired", actor="user:alice")
    assert resumed.changed and resumed.data["incident_id"] == "job/inc-1"
    assert reason_of(slurm, "n2") == ""
    wait_until(lambda: slurm.states()["n2"] == "idle", 30, "n2 idle (slurmctld pings a resumed node)")
    assert b.cordoned() == {} and set(b.drained()) == {"n3"}


def test_restart_in_the_allocation_leaves_the_drained_node_out(slurm: SlurmCluster, tmp_path: Path) -> None:
    b = backend(slurm)
    settings = b.settings
    cli = SubprocessCli(settings.conf)
    job = slurm.run("sbatch", "--parsable", "-N", "3", "--ntasks-per-node=1", "--chdir", str(tmp_path),
                    "--output", str(tmp_path / "slurm-%j.out"), "--wrap", "sleep 600").strip()
    wait_until(lambda: running(cli, settings, job), 30, f"job {job} running")
    assert not running(cli, settings, "999999")  # a job Slurm does not know: "Invalid job id specified"
    nodelist = slurm.run("squeue", "-h", "-j", job, "-o", "%N").strip()
    alloc = Allocation.from_env({"SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": nodelist, "SLURMD_NODENAME": "n1"})
    assert alloc is not None and alloc.nodes == ("n1", "n2", "n3") == tuple(hostnames(cli, settings, nodelist))

    b.cordon("n2", reason="hang", incident_id="job/inc-4", actor="controller")
    where = ["bash", "-c", "echo $SLURMD_NODENAME"]
    # a drain keeps new jobs off the node, not the allocation's own steps: the exclude is what leaves it out
    assert set(slurm.run("srun", f"--jobid={job}", "-N", "3", "--overlap", *where).split()) == {"n1", "n2", "n3"}
    argv = relaunch_argv(alloc, alive=running(cli, settings, job), exclude=set(b.cordoned()), nodes_min=2,
                         nodes_max=3, command=where, script="")
    assert argv is not None and "--exclude=n2" in argv and "2-2" in argv
    assert set(slurm.run(*argv[:1], "--overlap", *argv[1:]).split()) == {"n1", "n3"}

    # no allocation left: the controller submits a fresh job without the drained node, never a requeue
    harness = relaunch_harness(None, job=f"slurm-{job}", conf=str(slurm.conf), script=str(tmp_path / "job.sh"))
    slurm.run("scancel", job)
    wait_until(lambda: not running(cli, settings, job), 30, f"job {job} ended")
    out = tmp_path / "where"
    (tmp_path / "job.sh").write_text(f"#!/bin/bash\n#SBATCH --chdir={tmp_path}\n#SBATCH --output={tmp_path}/slurm-%j.out\n"
                                     f"srun bash -c 'echo $SLURMD_NODENAME' > {out}.tmp && mv {out}.tmp {out}\n")
    case = allocation_ends(harness, None)
    harness.run(lambda: outcomes(harness, case))
    (o,) = outcomes(harness, case)
    (done,) = harness.actions(action="relaunch", status="succeeded", incident_id=case)
    fresh = done.details["new_job_id"]
    assert o.result == "relaunched" and fresh != job and f"relaunched as job {fresh}" in o.reason
    tag = harness.actions(action="relaunch", status="started", incident_id=case)[0].details["tag"]
    assert f"{fresh}|{tag}" in slurm.run("squeue", "-h", "-a", "-t", "all", "-o", "%i|%k").split()
    wait_until(out.exists, 60, f"the fresh job {fresh}'s output")
    assert set(out.read_text().split()) == {"n1", "n3"}
    shown = slurm.run("scontrol", "show", "job", "-o", fresh)
    assert "Requeue=0" in shown and "ExcNodeList=n2" in shown and "NodeList=n[1,3]" in shown, shown
    again = harness.successor()  # the log replayed: the decision stands, nothing is submitted again
    for _ in range(3):
        again.turn()
    assert not again.fx.events
    assert slurm.run("squeue", "-h", "-a", "-t", "all", "-o", "%k").split().count(tag) == 1


def test_recipe_is_accepted_and_a_failed_prolog_drains_as_vigil(slurm: SlurmCluster, tmp_path: Path) -> None:
    deploy = Path(__file__).resolve().parents[2] / "deploy" / "slurm"
    checked = subprocess.run(["sbatch", "--test-only", "-N", "2-3", "--chdir", str(tmp_path), str(deploy / "vigil.sbatch")],
                             env=slurm.env, capture_output=True, text=True, check=False)
    assert checked.returncode == 0 and "to start at" in checked.stderr, checked.stderr  # slurmctld read its #SBATCH lines
    env = {**slurm.env, "VIGIL_PYTHON": sys.executable, "SLURMD_NODENAME": "n2", "SLURM_JOB_ID": "77",
           "VIGIL_PROLOG_ARGS": "--checks gemm --gemm-size 256 --gemm-iters 20 --timeout 1e-9"}
    failed = subprocess.run(["bash", str(deploy / "prolog.sh")], env=env, capture_output=True, text=True, check=False)
    assert failed.returncode == 1
    held = backend(slurm).cordoned()
    assert set(held) == {"n2"} and held["n2"].incident_id == "prolog-77"
    assert reason_of(slurm, "n2") == "vigil: prolog-77 diagnostics failed (gemm) on n2"
