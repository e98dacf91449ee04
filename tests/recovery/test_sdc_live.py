"""Silent data corruption in a real job, through the live services (issue 51): one bit flipped in one parameter of
one rank is named by the analyzer, rolled back and replayed by the controller, and judged from the replay.

Three `vigil run --nodes 2:3` agents run tests/recovery/sdc_worker.py (gloo, one rank per host, a flat all-reduce,
a replica digest every `EVERY` steps, a snapshot every step and a checkpoint every 5); the analyzer runs as a
`vigil analyzer` process on its own store, the controller as `vigil recovery run`, on the session's broker. After
the optimizer step of `FLIP` the rank on `SUSPECT` flips one bit of one weight. Asserted from the event log:

* the analyzer's `silent_data_corruption` incident names that replica: host `SUSPECT`, its rank, the first digest
  step after the flip as the first differing one and the digest step before it as the last agreed one;
* the controller pauses the job and restarts it from a snapshot or checkpoint at or before the last agreed step
  (the ranks' own `restored` reports and first steps say so), replays, and publishes its verdict (`diagnose` on the
  suspect) with the steps recomputed, which the restart's first step gives back exactly;
* once only (`--flip-once`): the replay does not reproduce it, the verdict is `transient`, nothing is cordoned;
  every time (a faulty GPU): the replay differs again on `SUSPECT`, the verdict is `persistent`, the follow-up case
  cordons it and the job resumes on the two others from the same bound;
* the job trains on past the steps the rollback threw away and, told to end, finishes: its agents exit 0 and the
  controller records it finished; the goodput ledger (`vigil goodput`, on the analyzer's store) balances and
  charges the rollback, its restart and every step it threw away (the replay's recomputed ones among them) to
  `sdc`, not to a fault's `steps_redone`.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.support.live import HERE, PY, Live
from tests.support.recovery_waits import cordoned
from tests.support.services import analyzer_service
from tests.support.waiting import wait_until
from vigil.contract import Checkpoint, Incident, Member, RecoveryAction
from vigil.recovery.controller.state import Case, ClusterState

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600),
              pytest.mark.recovery_run_as("", reason="written before the nobody default: its job runs this venv's "
                                                      "interpreter and writes under live.tmp, not live.writable")]
HOSTS, SUSPECT = ("h0", "h1", "h2"), "h1"
FLIP, EVERY = 12, 5
BAD, GOOD = 15, 10  # the first digest step after the flip, the one before it
RECOVERY = {"VIGIL_RECOVERY_POLICY_CORDON_SLOW": "false", "VIGIL_RECOVERY_POLICY_SDC_SETTLE_S": "30"}


def sdc_case(s: ClusterState, job: str) -> Case | None:
    """The rollback of the job's first SDC incident (its case id is the incident's)."""
    cases = [c for c in s.cases.values() if c.job_id == job and "replay" in c.plan and c.opened_at is not None]
    return min(cases, key=lambda c: c.opened_at or 0) if cases else None


def run(live: Live, job: str, *, once: bool) -> dict[str, Any]:
    """The job with its flip, awaited to the end of the SDC case (and, persistent, of its follow-up), then told to end
    and awaited until it finished. Returns what the test asserts on."""
    tmp = live.tmp
    analyzer, dsn = analyzer_service(live.env, tmp)
    stop = tmp / "stop"
    command = [PY, "-m", "torch.distributed.run", "--nproc-per-node", "1", str(HERE / "sdc_worker.py"),
               "--ckpt", str(tmp / "ckpt"), "--stop", str(stop), "--step-ms", "150", "--digest-every", str(EVERY),
               "--flip-host", SUSPECT, "--flip-step", str(FLIP), *(["--flip-once", str(tmp / "flip.once")] if once else [])]
    try:
        analyzer.start()
        wait_until(analyzer.ready, 300, "the analyzer to run")
        live.start_job(job, HOSTS, command, nodes="2:3")
        live.wait_for(lambda s: (c := sdc_case(s, job)) is not None and c.outcome is not None, 360,
                      "the SDC rollback and its replay to end")
        case = sdc_case(live.state, job)
        assert case is not None
        follow = f"{case.case_id}/persistent"
        if not once:
            live.wait_for(lambda s: (c := s.cases.get(follow)) is not None and c.outcome is not None, 240,
                          "the persistent verdict's cordon and restart")
        # the job trains on past the steps the last rollback threw away (so each is redone, as the ledger counts)
        last = max((c.outcome.last_step or 0) for c in live.state.cases.values() if c.job_id == job and c.outcome)
        live.wait_for(lambda s: all((m.last_step or 0) > last for h in s.job(job).world
                                    if (m := s.job(job).members.get(h)) is not None), 120,
                      f"the job to train past step {last} again")
        stop.touch()
        live.wait_for(lambda s: s.job(job).finished is not None, 240, "the controller to record the job finished")
        world = list(live.state.job(job).world)
        wait_until(lambda: all(live.agents[h].poll() is not None for h in world), 120, "the last world's agents to exit")
        assert {h: live.agents[h].returncode for h in world} == dict.fromkeys(world, 0)
        assert analyzer.stop() == 0  # what it ingested is stored: the ledger reads it
        done = subprocess.run([PY, "-m", "vigil", "goodput", "--job", job, "--json"], capture_output=True, text=True,
                              env={**live.env, "VIGIL_CLICKHOUSE_DSN": dsn}, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return {"case": case, "follow": live.state.cases.get(follow), "ledger": json.loads(done.stdout)["all"]}
    finally:
        analyzer.stop()


def restored_by(live: Live, job: str, case: Case) -> set[tuple[str, int]]:
    """(host, step) of the ranks' `restored` reports after `case`'s restart began (before any later restart)."""
    restart = case.step("restart", job)
    assert restart is not None and restart.status == "succeeded" and restart.started_at is not None
    later = [a.ts for a in live.actions(action="restart", target=job, status="started") if a.ts > restart.started_at]
    until = min(later) if later else None
    return {(e.host, e.step) for e in live.events if isinstance(e, Checkpoint) and e.job_id == job
            and e.phase == "restored" and e.ts >= restart.started_at and (until is None or e.ts < until)}


def verdict_of(live: Live, case: Case) -> RecoveryAction:
    [record] = [a for a in live.actions(action="diagnose", incident_id=case.case_id, status="succeeded")]
    assert record.actor == "controller" and record.target == SUSPECT and record.signature
    return record


def first_run(live: Live, case: Case) -> object:
    """The run the analyzer first named the replica in (the evidence of the incident that opened `case`)."""
    return next(e.evidence.get("run") for e in live.events if isinstance(e, Incident) and e.incident_id == case.case_id)


def check_rollback(live: Live, job: str, case: Case) -> dict[str, Any]:
    """What every variant shares: the replica named, the rollback bounded, the replay's steps counted exactly."""
    inc = next(e for e in live.events if isinstance(e, Incident) and e.incident_id == case.case_id)
    # (the analyzer's first word opened the case; a replay that differs again re-publishes it from the new run)
    assert inc.category == "silent_data_corruption" and [c.host for c in inc.culprits] == [SUSPECT], inc
    suspect_rank = inc.culprits[0].rank
    ranks = {e.node_rank for e in live.events if isinstance(e, Member) and e.job_id == job and e.host == SUSPECT
             and e.generation == 1 and e.node_rank is not None}
    assert ranks == {suspect_rank}  # the rank that ran on the suspect host (one rank per host)
    assert (inc.evidence["step"], inc.evidence["good_step"]) == (BAD, GOOD), inc.evidence
    assert case.plan == ["pause", "restart", "replay"]
    assert case.outcome is not None and case.outcome.result == "resumed", case.outcome
    restart = case.step("restart", job)
    assert restart is not None
    gen = int(restart.started_details["generation"])
    restored = restored_by(live, job, case)
    assert restored and {s for _h, s in restored} <= set(range(GOOD + 1)), restored  # nothing after the last agreed
    [snapshot] = {s for _h, s in restored}  # every rank from the same step
    firsts = {e.first_step for e in live.events if isinstance(e, Member) and e.job_id == job and e.generation == gen
              and e.first_step is not None}
    assert firsts == {snapshot + 1}, firsts  # the ranks' own first step of the replay
    replay = dict(verdict_of(live, case).details["replay"])
    assert (replay["first_bad_step"], replay["snapshot_step"], replay["rank"]) == (BAD, snapshot, suspect_rank)
    assert replay["steps_recomputed"] == BAD - snapshot  # the steps from the restored one up to the first bad step
    out = case.outcome
    assert (out.checkpoint_step, out.first_step) == (snapshot, snapshot + 1), out
    assert out.steps_lost is not None and out.steps_lost >= replay["steps_recomputed"]  # every step it threw away
    print(f"\nSDC on {SUSPECT} rank {suspect_rank}: first differed at step {BAD} (agreed at {GOOD}); rolled back to "
          f"step {snapshot}, {replay['steps_recomputed']} steps recomputed, verdict {replay['verdict']}")
    return replay


@pytest.mark.recovery_env(RECOVERY)
def test_a_bit_flipped_once_is_named_rolled_back_replayed_and_judged_transient(live: Live) -> None:
    job = "job-sdc-once"
    got = run(live, job, once=True)
    case = got["case"]
    replay = check_rollback(live, job, case)
    assert (replay["verdict"], replay["action"]) == ("transient", "count"), replay
    runs = {e.evidence.get("run") for e in live.events if isinstance(e, Incident) and e.incident_id == case.case_id
            and e.status == "open"}
    assert len(runs) == 1  # the replay's run never named the replica again
    ledger = got["ledger"]
    assert ledger["balanced"] and ledger["seconds"]["steps_redone"] == 0, ledger  # no fault but the SDC: its cost is
    out = case.outcome
    assert out is not None and out.restart_s is not None
    assert ledger["seconds"]["sdc"] >= out.restart_s > 0  # the SDC's, the steps it threw away included
    assert replay["suspect"] == {"host": SUSPECT, "reproduced": False}
    assert got["follow"] is None and cordoned(live) == set()
    assert not live.actions(action="cordon", status="succeeded")
    assert sorted(live.state.job(job).world) == list(HOSTS)  # the job ended on all three hosts
    assert (live.tmp / "flip.once").exists()  # the flip happened, once


@pytest.mark.recovery_env(RECOVERY)
def test_a_bit_flipped_every_time_on_one_host_is_persistent_and_that_host_is_cordoned(live: Live) -> None:
    job = "job-sdc-again"
    got = run(live, job, once=False)
    case, follow = got["case"], got["follow"]
    replay = check_rollback(live, job, case)
    assert (replay["verdict"], replay["action"]) == ("persistent", "cordon"), replay
    step, restart = case.step("replay", job), case.step("restart", job)
    assert step is not None and restart is not None and restart.started_at is not None
    merged = set(step.details["merged"])  # the replay's evidence: a new incident, or the case's own re-published
    replayed = [e for e in live.events if isinstance(e, Incident) and e.incident_id in merged
                and e.first_sign >= restart.started_at and e.evidence.get("run") != first_run(live, case)]
    assert replayed and {e.culprits[0].host for e in replayed} == {SUSPECT} and replayed[0].evidence["step"] == BAD
    assert replay["suspect"] == {"host": SUSPECT, "reproduced": True}
    assert follow is not None and follow.outcome is not None and follow.outcome.result == "resumed", follow
    assert cordoned(live) == {SUSPECT} and follow.outcome.cordoned == [SUSPECT]
    assert sorted(follow.outcome.hosts) == ["h0", "h2"] and sorted(live.state.job(job).world) == ["h0", "h2"]
    resumed = restored_by(live, job, follow)
    assert {h for h, _s in resumed} == {"h0", "h2"} and max(s for _h, s in resumed) <= GOOD, resumed
    ledger = got["ledger"]  # the follow-up (its cordon and restart) is the SDC's cost too
    assert ledger["balanced"] and ledger["seconds"]["steps_redone"] == 0 and ledger["seconds"]["sdc"] > 0, ledger  # the follow-up restores within the same bound
