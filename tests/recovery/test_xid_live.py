"""The Xid catalog decides a real job's recovery (issue 49): three `vigil run --nodes 2:3` agents run a gloo job
(tests/recovery/job_worker.py); the driver (the test's stand-in: each host's fake kernel log, which its agent
follows as /dev/kmsg) reports an Xid 31 for h1's rank, which then dies of the CUDA error: an application fault,
the job restarts on the same three hosts, no cordon. Later it reports an Xid 79 for h2's rank: the GPU fell off
the bus, the agent attests its failed generation with that kernel fact and the controller cordons h2 at once;
training resumes on h0 and h1. No analyzer runs: the agents' attested reports decide (with the catalog)."""

from __future__ import annotations

import pytest

from tests.support.live import Live, worker
from tests.support.recovery_waits import cordoned, training
from vigil.contract import LogLine, Member

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(500)]
JOB = "job-xids"


def trained(live: Live, generation: int) -> set[str]:
    """The hosts that reported training in `generation` of the job."""
    return {e.host for e in live.events if isinstance(e, Member) and e.job_id == JOB and e.generation == generation
            and e.state == "training"}


@pytest.mark.recovery_env({"VIGIL_RECOVERY_POLICY_CORDON_SLOW": "false"})
def test_an_xid_31_restarts_without_a_cordon_and_an_xid_79_cordons(live: Live) -> None:
    args = ["--ckpt", str(live.tmp / "ckpt"), "--xid", "31:h1:8", "--xid", "79:h2:16", "--once-dir", str(live.tmp)]
    live.start_job(JOB, ["h0", "h1", "h2"], worker(*args), nodes="2:3")

    # from the log, not the folded state: generation 2 may last under a second before the Xid 79 (8 steps of 100 ms)
    live.wait_for(lambda _s: trained(live, 2) == {"h0", "h1", "h2"}, 240,
                  "the job restarted on the same three hosts after the Xid 31")
    first = [c for c in live.state.cases.values() if c.job_id == JOB and c.cls not in ("start", "hardware")]
    assert [c.cls for c in first] == ["software"]  # (the Xid 79's hardware case may already be open)
    assert "cordon" not in first[0].plan and cordoned(live) <= {"h2"}  # no host of the Xid 31 goes out
    exited = [e for e in live.events if isinstance(e, Member) and e.host == "h1" and e.state == "exited"]
    assert exited and all(m.fault is None for m in exited)  # an application Xid is not the host's fault

    live.wait_for(training(JOB, 3, 2), 240, "the job resumed on two hosts after the Xid 79")
    assert cordoned(live) == {"h2"} and sorted(live.state.job(JOB).world) == ["h0", "h1"]
    second = [c for c in live.state.cases.values() if c.job_id == JOB and c.cls == "hardware"]
    assert second, [(c.case_id, c.cls) for c in live.state.cases.values()]
    attested = [e for e in live.events if isinstance(e, Member) and e.host == "h2" and e.fault == "xid"]
    assert attested and attested[0].signature  # the agent attested the kernel's Xid

    facts = {(e.host, e.xid): e for e in live.events if isinstance(e, LogLine) and e.category == "xid"}
    assert set(facts) == {("h1", 31), ("h2", 79)}
    assert (facts[("h1", 31)].source, facts[("h1", 31)].action, facts[("h1", 31)].severity) == (
        "kernel", "restart_job", "error")
    assert (facts[("h2", 79)].source, facts[("h2", 79)].action, facts[("h2", 79)].rank) == (
        "kernel", "reboot_then_check", 2)
