"""The SDC rollback (issue 51), the engine against the simulated fleet: a `silent_data_corruption` incident rolls the
job back to the suspect's last agreed step (the start commands bound the restore), the replay is judged from the
replica detector's incidents on the replayed steps (persistent: cordon and restart without it, restoring within the
same bound; transient: counted against the host; batch: the step range recorded), the signed `diagnose` outcome
carries the verdict and the steps recomputed, and a controller rebuilt from the log decides nothing twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.fleet import Fleet, Harness, incident
from vigil.contract import Command, RankRef
from vigil.recovery.controller.fleetmemory import classes

pytestmark = pytest.mark.pure
JOB = "job-sdc"
BAD, GOOD = 32, 27  # the suspect first differed at step 32, agreed last at 27 (a digest every 5 steps)


def sdc(h: Harness, host: str, n: int, *, at_step: int = BAD, good: int | None = GOOD) -> str:
    inc = incident(JOB, host, category="silent_data_corruption", cause="unknown", at=h.now, strong=False,
                   iid=f"{JOB}/silent_data_corruption/{host}/{n}")
    inc = inc.model_copy(update={"culprits": [RankRef(host=host, rank=1, message="digest differs")],
                                 "evidence": {"signal": "digest", "step": at_step, "good_step": good, "rank": 1,
                                              "host": host, "fault_classes": ["sdc"]}})
    h.feed([inc])
    return inc.incident_id


def rolled_back(tmp: Path, **settings: Any) -> tuple[Harness, str]:
    """A job of three hosts, checkpointed at step 30 (past the last agreed step), named SDC on h1 at step 32."""
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = Harness.build(fleet, tmp, policy_sdc_settle_s=3, **settings)
    h.run(lambda: h.training(1))
    fleet.checkpoint = 30
    for _ in range(7):
        h.turn()
    iid = sdc(h, "h1", 1)
    h.run(lambda: (s := h.engine.state.cases.get(iid)) is not None
          and (r := s.step("restart", JOB)) is not None and r.status == "succeeded")
    return h, iid


def restarts_of(h: Harness, case: str) -> list[Command]:
    return [e for e in h.fx.events if isinstance(e, Command) and e.action == "start" and e.incident_id == case]


def done(h: Harness, case: str) -> bool:
    c = h.engine.state.cases.get(case)
    return c is not None and c.outcome is not None


def verdict(h: Harness, case: str) -> dict[str, Any]:
    [record] = h.actions(action="diagnose", incident_id=case, target="h1")
    assert record.actor == "controller" and record.status == "succeeded"
    return dict(record.details["replay"])


def test_the_rollback_restores_at_or_before_the_last_agreed_step_and_a_clean_replay_is_transient(
        tmp_path: Path) -> None:
    h, iid = rolled_back(tmp_path)
    case = h.engine.state.cases[iid]
    assert case.plan == ["pause", "restart", "replay"] and case.cls == "sdc"  # its own class, not `other_as`
    starts = restarts_of(h, iid)
    assert starts and {c.world.restore_max_step for c in starts if c.world} == {GOOD}
    assert h.engine.state.job(JOB).members["h1"].first_step == GOOD + 1  # the checkpoint of step 30 was passed over
    h.run(lambda: done(h, iid))
    got = verdict(h, iid)
    assert (got["verdict"], got["action"], got["snapshot_step"], got["first_bad_step"]) == \
           ("transient", "count", GOOD, BAD)
    assert got["steps_recomputed"] == BAD - GOOD
    assert h.engine.state.cases[iid].outcome.result == "resumed"  # type: ignore[union-attr]
    assert classes(h.engine.state.cases[iid]) == {"sdc"}  # fleet memory counts it against h1 as class sdc
    assert not [a for a in h.actions(action="cordon", status="succeeded") if a.target == "h1"]
    assert f"{iid}/persistent" not in h.engine.state.cases


def test_the_fault_repeating_on_the_suspect_is_persistent_it_is_cordoned_and_the_job_restarts_without_it(
        tmp_path: Path) -> None:
    h, iid = rolled_back(tmp_path)
    h.turn()
    again = sdc(h, "h1", 2)  # the replica detector names h1 again in the replayed steps
    h.run(lambda: done(h, iid))
    got = verdict(h, iid)
    assert (got["verdict"], got["action"], got["strong"]) == ("persistent", "cordon", False)  # no peer on one machine
    assert h.engine.state.merged[again] == iid  # the replay's evidence opens no recovery of its own
    follow = f"{iid}/persistent"
    h.run(lambda: done(h, follow))
    assert [a.target for a in h.actions(action="cordon", status="succeeded", incident_id=follow)
            if a.target != JOB] == ["h1"]
    starts = restarts_of(h, follow)
    assert sorted(c.host for c in starts) == ["h0", "h2"]
    assert {c.world.restore_max_step for c in starts if c.world} == {GOOD}  # the replay holds the flip again
    assert h.engine.state.cases[follow].outcome.result == "resumed"  # type: ignore[union-attr]
    for _ in range(10):  # no second case for the replay's incident
        h.turn()
    assert {c for c in h.engine.state.cases if c.startswith(f"{JOB}/silent")} == {iid, follow}


def test_every_replica_differing_again_is_the_batch_and_its_steps_are_recorded(tmp_path: Path) -> None:
    h, iid = rolled_back(tmp_path)
    h.turn()
    sdc(h, "h1", 2)
    sdc(h, "h0", 3)
    h.run(lambda: done(h, iid))
    got = verdict(h, iid)
    assert (got["verdict"], got["action"]) == ("batch", "skip_batch")
    [step] = h.actions(action="replay", status="succeeded", incident_id=iid)
    assert step.details["skip"] == {"from_step": GOOD + 1, "to_step": BAD, "rank": 1}
    assert f"{iid}/persistent" not in h.engine.state.cases  # the sampler skip itself is not implemented


def test_a_replay_that_never_reaches_its_steps_is_undecided(tmp_path: Path) -> None:
    h, iid = rolled_back(tmp_path, policy_sdc_replay_timeout_s=5)
    h.fleet.steps_per_turn = 0
    h.run(lambda: done(h, iid))
    assert verdict(h, iid)["verdict"] == "undecided"


def test_a_replay_that_crashes_is_judged_at_once_and_the_crash_is_the_next_case(tmp_path: Path) -> None:
    h, iid = rolled_back(tmp_path, policy_exit_grace_s=1)
    h.turn()
    h.feed(h.fleet.crash("h2", h.now))
    h.run(lambda: done(h, iid))
    assert verdict(h, iid)["verdict"] == "undecided"
    h.run(lambda: any(c.startswith(f"{JOB}/exit/") for c in h.engine.state.cases))


@pytest.mark.parametrize("cut", ["settling", "judged"])
def test_a_controller_rebuilt_from_the_log_judges_once(tmp_path: Path, cut: str) -> None:
    h, iid = rolled_back(tmp_path)
    h.turn()
    sdc(h, "h1", 2)
    if cut == "settling":
        h.run(lambda: (s := h.engine.state.cases[iid].step("replay", JOB)) is not None
              and "reached_at" in s.started_details)
    else:
        h.run(lambda: done(h, iid))
    incidents = list(h.engine.state.incidents.values())  # on the log too: the harness feeds them beside it
    h = h.successor()
    h.feed(list(incidents))
    h.run(lambda: done(h, f"{iid}/persistent"))
    for _ in range(5):
        h.turn()
    everything = h.fx.events  # the successor's own publications
    old = h.engine.state.cases[iid]
    assert old.outcome is not None
    mine = [e for e in everything if getattr(e, "action", "") in ("replay", "diagnose")
            and getattr(e, "incident_id", "") == iid and getattr(e, "status", "") == "succeeded"]
    assert len(mine) == (2 if cut == "settling" else 0)  # the verdict, taken by whichever controller got there


def test_a_job_rolled_back_too_often_is_halted_and_paged_not_rolled_back_again(tmp_path: Path) -> None:
    """Digests are the job's claims: a job named SDC again after `policy.sdc_rollbacks` rollbacks within the window
    is paused and a human paged, never rolled back in an endless loop (review of 2026-12-07)."""
    h, first = rolled_back(tmp_path, policy_sdc_rollbacks=1)
    h.run(lambda: done(h, first))
    again = sdc(h, "h1", 2)
    h.run(lambda: done(h, again))
    case = h.engine.state.cases[again]
    assert case.plan == ["pause", "halt"] and case.outcome is not None and case.outcome.result == "halted"
    assert not restarts_of(h, again)
