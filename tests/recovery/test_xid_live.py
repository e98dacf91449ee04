"""The Xid catalog decides a real job's recovery (issue 49): three `vigil run --nodes 2:3` agents run a gloo job
(tests/recovery/job_worker.py); the driver (the test's stand-in: each host's fake kernel log, which its agent
follows as /dev/kmsg) reports an Xid 31 for h1's rank, which then dies of the CUDA error: an application fault,
the job restarts on the same three hosts, no cordon. Later it reports an Xid 79 for h2's rank: the GPU fell off
the bus, the agent attests its failed generation with that kernel fact and the controller cordons h2 at once;
training resumes on h0 and h1. Then it reports an Xid 48 (double-bit ECC: reset the GPU) naming h0's GPU 1 (its
PCI address in the host's fake sysfs): no backend resets a GPU, so the controller quarantines GPU 1 of h0, not
the host, and the job restarts on h0 and h1, h0's rank started with CUDA_VISIBLE_DEVICES=0,2,3. No analyzer
runs: the agents' attested reports decide (with the catalog)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.live import Live, worker
from tests.support.recovery_waits import cordoned, training
from vigil.contract import LogLine, Member, RecoveryAction
from vigil.cordons import CordonRegistry

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(500)]
JOB = "job-xids"


def trained(live: Live, generation: int) -> set[str]:
    """The hosts that came up in `generation` of the job: reported a first step in it (training, or exited since: a
    generation can end within a heartbeat), as the controller's restart step counts them."""
    return {e.host for e in live.events if isinstance(e, Member) and e.job_id == JOB and e.generation == generation
            and e.first_step is not None}


def four_gpus(root: Path) -> Path:
    """A sysfs tree with four GPUs bound to the nvidia driver; the fake Xid's PCI:0000:3b:00 is the second (1)."""
    for address in ("0000:1a:00.0", "0000:3b:00.0", "0000:5e:00.0", "0000:86:00.0"):
        (root / "bus" / "pci" / "drivers" / "nvidia" / address).mkdir(parents=True)
    return root


@pytest.mark.recovery_env({"VIGIL_RECOVERY_POLICY_CORDON_SLOW": "false"})
def test_an_xid_31_restarts_without_a_cordon_an_xid_79_cordons_and_an_xid_48_quarantines_its_gpu(live: Live) -> None:
    envs = live.writable("envs")  # what the training processes write: theirs (vigil run --user)
    args = ["--ckpt", str(live.writable("ckpt")), "--xid", "31:h1:8", "--xid", "79:h2:16", "--xid", "48:h0:24",
            "--once-dir", str(live.writable("once")), "--record-env", str(envs)]
    sysfs = four_gpus(live.tmp / "sysfs")
    live.start_job(JOB, ["h0", "h1", "h2"], worker(*args, python=live.python), nodes="2:3",
                   env={"VIGIL_SYSFS_ROOT": str(sysfs)})

    # from the log, not the folded state: generation 2 may last under a second before the Xid 79 (8 steps of 100 ms)
    live.wait_for(lambda _s: trained(live, 2) == {"h0", "h1", "h2"}, 240,
                  "the job restarted on the same three hosts after the Xid 31")
    first = [c for c in live.state.cases.values() if c.job_id == JOB and c.cls not in ("start", "hardware")]
    assert [c.cls for c in first] == ["software"]  # (the Xid 79's hardware case may already be open)
    assert "cordon" not in first[0].plan and cordoned(live) <= {"h2"}  # no host of the Xid 31 goes out
    exited = [e for e in live.events if isinstance(e, Member) and e.host == "h1" and e.state == "exited"]
    assert exited and all(m.fault is None for m in exited)  # an application Xid is not the host's fault

    # from the log too: generation 3 lasts 8 steps (to the Xid 48 at step 24), under a second
    live.wait_for(lambda _s: trained(live, 3) == {"h0", "h1"}, 240, "the job resumed on two hosts after the Xid 79")
    assert cordoned(live) == {"h2"} and sorted(live.state.job(JOB).world) == ["h0", "h1"]
    second = [c for c in live.state.cases.values() if c.job_id == JOB and c.cls == "hardware"]
    assert second, [(c.case_id, c.cls) for c in live.state.cases.values()]
    attested = [e for e in live.events if isinstance(e, Member) and e.host == "h2" and e.fault == "xid"]
    assert attested and attested[0].signature  # the agent attested the kernel's Xid

    live.wait_for(training(JOB, 4, 2), 240, "the job resumed on h0 and h1 after the Xid 48 on h0's GPU 1")
    assert cordoned(live) == {"h2"} and sorted(live.state.job(JOB).world) == ["h0", "h1"]  # h0 keeps its 3 GPUs
    (quarantine,) = [a for a in live.events if isinstance(a, RecoveryAction) and a.action == "quarantine"
                     and a.status == "succeeded"]
    assert (quarantine.target, quarantine.details["gpus"]) == ("h0", [1]) and quarantine.signature
    assert {h: q.gpus for h, q in CordonRegistry(live.home / "cordons.json").quarantined().items()} == {"h0": (1,)}
    status = live.cli("recovery", "status", "--job", JOB)
    assert status.returncode == 0 and "quarantined GPUs: h0 GPU 1 (GPU(s) 1: h0 exited" in status.stdout, status.stderr
    faulted = [e for e in live.events if isinstance(e, Member) and e.host == "h0" and e.fault == "xid"]
    assert faulted and (faulted[0].fault_gpus, faulted[0].fault_action) == ([1], "reset_gpu") and faulted[0].signature
    # what the ranks were started with: every GPU before the quarantine (nothing set), then all but GPU 1 on h0
    assert (envs / "env-h0-g3").read_text() == "<unset>"
    assert (envs / "env-h0-g4").read_text() == "0,2,3" and (envs / "env-h1-g4").read_text() == "<unset>"

    facts = {(e.host, e.xid): e for e in live.events if isinstance(e, LogLine) and e.category == "xid"}
    assert set(facts) == {("h1", 31), ("h2", 79), ("h0", 48)}
    assert (facts[("h0", 48)].action, facts[("h0", 48)].gpu_index) == ("reset_gpu", 1)
    assert (facts[("h1", 31)].source, facts[("h1", 31)].action, facts[("h1", 31)].severity) == (
        "kernel", "restart_job", "error")
    assert (facts[("h2", 79)].source, facts[("h2", 79)].action, facts[("h2", 79)].rank) == (
        "kernel", "reboot_then_check", 2)
