"""A real gloo job on a real Slurm: `srun vigil run --nodes 2:3 -- torchrun ...` on three nodes, an Xid on n2.

The agents run as Slurm tasks (their host is SLURMD_NODENAME, their job `slurm-<id>`); the controller
(`vigil recovery run`, `backend = "slurm"`) drains n2 with vigil's reason and resumes the job on the
other two from its checkpoint, while an operator's drain of n3 stays as it was.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.support.live import PY, Live, worker
from tests.support.slurm_cluster import SlurmCluster
from vigil.contract import Member
from vigil.signing import KeyStore

pytestmark = [pytest.mark.slurm, pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]


def reason_of(slurm: SlurmCluster, node: str) -> str:
    line = slurm.run("scontrol", "show", "node", "-o", node)
    return re.sub(r" \[\S+@\S+\]$", "", line.split(" Reason=", 1)[1].strip()) if " Reason=" in line else ""


@pytest.mark.recovery_env({"VIGIL_RECOVERY_BACKEND": "slurm", "VIGIL_RECOVERY_SLURM_READ_INTERVAL_S": "1",
                           "VIGIL_RECOVERY_POLICY_CORDON_SLOW": "false"})
def test_xid_under_srun_drains_the_node_as_vigil_and_the_job_resumes_on_the_rest(
        live: Live, slurm: SlurmCluster) -> None:
    live.env.update(SLURM_CONF=str(slurm.conf), VIGIL_RECOVERY_SLURM_CONF=str(slurm.conf),
                    VIGIL_SNAPSHOT_ROOT=str(live.tmp / "shm"))  # this test's own host memory: shm/<node>/<job>
    args = ["--ckpt", str(live.writable("ckpt")), "--fault", "xid", "--fault-host", "n2", "--fault-step", "12",
            "--once", str(live.writable("once") / "xid.once")]  # the job's files: its own (vigil run --user)
    live.start_controller()
    for node in ("n1", "n2", "n3"):  # each node's agent attests its host's facts with its own key
        KeyStore(live.home / "keys").issue(node)
        live.kernel_log(node)  # and follows its own kernel log, where the driver's Xid lands
    agent = [PY, "-m", "vigil", "run", "--nodes", "2:3", "--rdzv-addr", "127.0.0.1", "--keepalive", "2",
             "--kill-grace", "10", "--heartbeat-interval", "5", *live.user_args(), "--",
             *worker(*args, python=live.python)]
    per_node = (f'export VIGIL_KMSG_PATH="{live.tmp}/kmsg-$SLURMD_NODENAME" FAKE_KMSG="{live.tmp}/kmsg-$SLURMD_NODENAME"; '
                'exec "$@"')
    log = (live.tmp / "srun.log").open("wb")  # beside the other logs: a failing wait shows its tail
    srun = subprocess.Popen(["srun", "-N", "3", "--ntasks-per-node=1", "--kill-on-bad-exit=0", "--chdir", str(live.tmp),
                             "bash", "-c", per_node, "agent", *agent],
                            env=live.env, stdout=log, stderr=subprocess.STDOUT)
    try:
        live.wait_for(lambda _s: {e.host for e in live.events if isinstance(e, Member) and e.generation == 1
                                  and e.first_step is not None} == {"n1", "n2", "n3"}, 240, "the job to train on n1..n3")
        job = next(e.job_id for e in live.events if isinstance(e, Member))
        slurm_id = slurm.run("squeue", "-h", "-o", "%i").split()[0]
        assert job == f"slurm-{slurm_id}"  # the agents took their identity from the allocation
        slurm.run("scontrol", "update", "nodename=n3", "state=drain", "reason=hw check by ops")

        live.wait_for(lambda s: (c := live.case(f"{job}/fault/g1/n2")) is not None and c.outcome is not None, 300,
                      "the recovery to end")
        case = live.case(f"{job}/fault/g1/n2")
        assert case is not None and case.cls == "hardware"
        out = case.outcome
        assert out is not None and out.result == "resumed", out
        assert out.cordoned == ["n2"] and out.hosts == ["n1", "n3"]
        assert reason_of(slurm, "n2").startswith(f"vigil: {case.case_id} hardware fault")
        assert slurm.states()["n2"] in ("drained", "draining")  # the allocation still holds it: draining
        assert reason_of(slurm, "n3") == "hw check by ops"  # the operator's drain, untouched

        status = live.cli("recovery", "status", "--job", job)
        assert status.returncode == 0, status.stderr
        assert re.search(r"cordoned: n2 \(hardware fault", status.stdout), status.stdout
        assert "drained by others (evidence; vigil never resumes them): n3 (hw check by ops, root)" in status.stdout
        resumed = live.cli("uncordon", "n3", "--job", job, "--reason", "not ours")
        assert resumed.returncode == 0 and "drained by someone else" in resumed.stdout, resumed.stderr
        assert reason_of(slurm, "n3") == "hw check by ops"
    finally:
        srun.terminate()
        try:
            srun.wait(30)
        except subprocess.TimeoutExpired:
            srun.kill()
            srun.wait()
        log.close()
