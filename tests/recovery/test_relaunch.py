"""A recovery whose Slurm allocation is gone submits the job afresh, once: the engine against an in-memory Slurm.

The fleet (fleet.py) trains as job `slurm-42` on n1..n3; n2's GPU fails and the allocation ends with it (every
agent leaves, squeue no longer knows job 42). The restart finds no host, so the controller decides a `relaunch`
(an event) and submits `sbatch --no-requeue` without n2; a new controller replaying the log never submits again,
neither after a lost sbatch answer nor after dying between the decision and the submission.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.recovery.relaunch_harness import JOB, allocation_ends, harness, outcomes
from tests.recovery.slurm_fake import FakeSlurm
from tests.support.fleet import DyingEffects
from vigil.contract import Alert, RecoveryAction
from vigil.recovery.backends.slurm import SlurmBackend, SlurmSettings
from vigil.recovery.controller.steps import short_id

pytestmark = pytest.mark.pure

def test_a_gone_allocation_is_submitted_afresh_without_the_bad_node(tmp_path: Path) -> None:
    fake = FakeSlurm(jobs={"42": "RUNNING"})
    h = harness(fake)
    case = allocation_ends(h, fake)
    h.run(lambda: outcomes(h, case))
    (o,) = outcomes(h, case)
    assert o.result == "relaunched" and o.cordoned == ["n2"] and "relaunched as job 1000" in o.reason
    (argv,) = fake.submitted
    assert argv[:4] == ["sbatch", "--no-requeue", "-N", "2-3"] and "--exclude=n2" in argv
    assert argv[-1] == "/opt/jobs/train.sh" and "--parsable" in argv
    assert not any(a in ("--requeue", "scontrol") or a.startswith("--jobid") for a in argv)  # never the old job
    (started,) = h.actions(action="relaunch", status="started", incident_id=case)
    assert started.details["exclude"] == ["n2"] and started.details["allocation"] == "42"
    assert fake.comments["1000"] == started.details["tag"]
    (done,) = h.actions(action="relaunch", status="succeeded", incident_id=case)
    assert done.details["new_job_id"] == "1000" and done.epoch == started.epoch
    assert [a.status for a in h.actions(action="restart", incident_id=case) if a.status != "planned"] == ["skipped"]
    assert not [e for e in h.fx.events if isinstance(e, Alert) and e.alert == "recovery"]  # nothing to page

    again = h.successor()  # the log replayed by a new controller: the decision stands, nothing is submitted again
    for _ in range(5):
        again.turn()
    assert len(fake.submitted) == 1 and not again.fx.events


def test_a_lost_sbatch_answer_is_looked_up_never_submitted_twice(tmp_path: Path) -> None:
    fake = FakeSlurm(jobs={"42": "RUNNING"}, lose_answer=1)
    h = harness(fake)
    case = allocation_ends(h, fake)
    h.run(lambda: outcomes(h, case))
    assert len(fake.submitted) == 1
    (o,) = outcomes(h, case)
    assert o.result == "relaunched" and "job 1000" in o.reason


def test_a_lost_answer_is_looked_up_among_this_users_jobs_only(tmp_path: Path) -> None:
    """Another user's job carrying the same tag (a comment anyone can set) is not the one this controller submitted
    (review of 2026-12-07): the lookup asks `squeue --me`."""
    fake = FakeSlurm(jobs={"42": "RUNNING"}, lose_answer=1)
    h = harness(fake)
    case = allocation_ends(h, fake)
    fake.jobs["777"], fake.comments["777"] = "RUNNING", f"vigil-{short_id(case)}"
    fake.others.add("777")
    h.run(lambda: outcomes(h, case))
    (o,) = outcomes(h, case)
    assert o.result == "relaunched" and "job 1000" in o.reason and len(fake.submitted) == 1


def test_a_controller_dead_between_decision_and_submission_pages_instead(tmp_path: Path) -> None:
    fake = FakeSlurm(jobs={"42": "RUNNING"})
    h = harness(fake, die_after=lambda e: isinstance(e, RecoveryAction) and e.action == "relaunch")
    case = allocation_ends(h, fake)
    with pytest.raises(AssertionError):
        h.run(lambda: False, turns=30)  # dies on the decision, before sbatch runs
    assert isinstance(h.fx, DyingEffects) and h.fx.dead and not fake.submitted
    nxt = h.successor()
    nxt.run(lambda: outcomes(nxt, case))
    assert not fake.submitted  # unknown whether it was submitted: asked, not submitted again
    (o,) = outcomes(nxt, case)
    assert o.result == "halted" and "not submitted again" in o.reason
    assert [e for e in nxt.fx.events if isinstance(e, Alert) and e.alert == "recovery"]  # a human decides


def test_without_a_script_or_while_the_allocation_runs_nothing_is_submitted(tmp_path: Path) -> None:
    fake = FakeSlurm(jobs={"42": "RUNNING"})
    h = harness(fake, script="")
    case = allocation_ends(h, fake)
    h.run(lambda: outcomes(h, case), turns=400)
    assert not fake.submitted and outcomes(h, case)[0].result == "halted"  # no host, no script: paged
    alive = FakeSlurm(jobs={"42": "RUNNING"})
    h2 = harness(alive)
    assert h2.fx.backend.allocation_gone(JOB) is None  # type: ignore[attr-defined]
    assert h2.fx.backend.allocation_gone("job-a") is None  # type: ignore[attr-defined]  # not a Slurm job's name
    alive.timeout_next()
    del alive.jobs["42"]
    assert h2.fx.backend.allocation_gone(JOB) is None  # type: ignore[attr-defined]  # squeue silent: unknown
    assert h2.fx.backend.allocation_gone(JOB) == "42"  # type: ignore[attr-defined]



def test_a_job_named_by_vigil_job_id_is_gone_when_no_job_of_its_name_runs(tmp_path: Path) -> None:
    """The recipe names the job `$SLURM_JOB_NAME`: its allocation is every Slurm job of that name; its script is
    `relaunch_scripts[job]`, and a fresh job already pending under the name is not submitted again."""
    fake = FakeSlurm(jobs={"42": "RUNNING"}, names={"42": "llama"})
    b = SlurmBackend(SlurmSettings(read_interval_s=0, relaunch_scripts={"llama": "/jobs/llama.sh"}), cli=fake)
    assert b.allocation_gone("llama") is None and b.allocation_gone("other") is None  # running; no script
    fake.jobs["42"] = "COMPLETED"
    assert b.allocation_gone("llama") == "name=llama"
    change = b.relaunch("llama", exclude=["n2"], nodes_min=2, nodes_max=3, tag="vigil-1")
    assert change.data["new_job_id"] == "1000" and fake.submitted[0][-1] == "/jobs/llama.sh"
    fake.names["1000"] = "llama"
    assert b.allocation_gone("llama") is None  # the fresh one is pending
