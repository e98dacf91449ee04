"""The controller's state stays bounded: finished recoveries and old triggers are forgotten, open ones never.

Pure: the engine against the simulated fleet (tests/support/fleet.py); one software fault every four
hour for 30 simulated hours, a state that keeps 2 hours and a job's latest 4 recoveries.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.support.fleet import Fleet, Harness, incident
from vigil.contract import Alert, Event, Outcome
from vigil.recovery.controller.compaction import Retention
from vigil.recovery.controller.state import ClusterState

pytestmark = pytest.mark.pure
JOB = "job-b"
RETAIN = Retention(keep=timedelta(hours=2), keep_cases=4)


def size(s: ClusterState) -> dict[str, int]:
    return {"cases": len(s.cases), "incidents": len(s.incidents), "alerts": len(s.alerts),
            "commands": len(s.commands), "acks": len(s.acks), "merged": len(s.merged), "cordons": len(s.cordons),
            "job_cases": sum(len(j.cases) for j in s.jobs.values()), "members": sum(len(j.members) for j in s.jobs.values())}


def crashes(tmp_path: Path, n: int, log: list[Event] | None = None) -> tuple[Harness, list[dict[str, int]]]:
    """`n` software faults an hour apart; `log` gets every event the controller folded, in order."""
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"])
    h = Harness.build(fleet, tmp_path)
    state = h.engine.state
    state.retention = RETAIN
    if log is not None:
        fold = state.apply
        state.apply = lambda events: (log.extend(events := list(events)), fold(events))  # type: ignore[method-assign]
    h.run(lambda: h.training(1))
    for _ in range(3):
        h.turn()
    sizes = []
    for i in range(n):
        inc = incident(JOB, "h1", cause="software", category="crash_cascade", at=h.now, iid=f"{JOB}/crash/{i}")
        alert = Alert(job_id=JOB, host="h1", ts=h.now, fingerprint=f"fp{i}", alert="error_log", subject="h1",
                      status="firing", severity="warning", summary="noise", first_seen=h.now, last_seen=h.now)
        h.feed([*fleet.crash("h1", h.now), inc, alert])
        h.run(lambda i=i: h.training(i + 2))  # type: ignore[misc]
        h.run(lambda i=i: h.engine.state.cases[f"{JOB}/crash/{i}"].outcome is not None)  # type: ignore[misc]
        for k in range(360):  # an hour of keep-alives, every 10 s, and a checkpoint (no crash loop)
            h.now += timedelta(seconds=10)
            h.feed(fleet.train(h.now) + (fleet.commit(1000 * (i + 1), h.now) if k == 180 else []))
        h.engine.state.compact()
        sizes.append(size(h.engine.state))
    return h, sizes


def test_folding_many_finished_recoveries_keeps_the_state_bounded(tmp_path: Path) -> None:
    h, sizes = crashes(tmp_path, 30)
    state = h.engine.state
    outcomes = [e for e in h.fx.events if isinstance(e, Outcome)]
    assert len(outcomes) == 31 and {o.result for o in outcomes} == {"resumed"}  # the start and 30 recoveries
    assert sizes[-1] == sizes[10], "the state stops growing once history is older than the retention"
    assert sizes[-1]["cases"] <= RETAIN.keep_cases and sizes[-1]["job_cases"] <= RETAIN.keep_cases
    assert sizes[-1]["incidents"] <= 2 and sizes[-1]["alerts"] <= 2 and sizes[-1]["members"] == 3
    assert state.job(JOB).cases == [f"{JOB}/crash/{i}" for i in range(26, 30)]  # the latest kept, in order
    assert len(state.forgotten) == 31 - RETAIN.keep_cases and state.job(JOB).generation == 31


def test_a_rebuild_forgets_the_same_and_late_copies_do_not_reopen_forgotten_recoveries(tmp_path: Path) -> None:
    log: list[Event] = []
    h, _ = crashes(tmp_path, 12, log)
    assert len(log) > 12 * 360 * 3
    rebuilt = ClusterState(retention=RETAIN)
    for i in range(0, len(log), 1000):  # compacting as it folds, as a long rebuild does
        rebuilt.apply(log[i:i + 1000])
        rebuilt.compact()
    assert size(rebuilt) == size(h.engine.state) and rebuilt.forgotten.keys() == h.engine.state.forgotten.keys()
    rebuilt._seen.clear()  # copies beyond the de-duplication window: every event of the log once more
    rebuilt.apply(log)
    assert rebuilt.cases.keys() == h.engine.state.cases.keys() and not any(c.open for c in rebuilt.cases.values())
    rebuilt.compact()  # the copied triggers and commands are history again
    assert size(rebuilt) == size(h.engine.state)
    successor = h.successor()
    successor.engine.state = rebuilt
    successor.turn()
    assert successor.fx.events == [], "nothing decided twice"


def test_an_open_recovery_and_its_job_are_never_forgotten(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", "h2"], nodes=(3, 3, 1))
    h = Harness.build(fleet, tmp_path, restart_wait_s=10 * 86400)
    h.engine.state.retention = RETAIN
    h.run(lambda: h.training(1))
    for _ in range(3):
        h.turn()
    fleet.hosts.remove("h2")  # h2 is gone: the restart waits for a third host
    inc = incident(JOB, "h2", at=h.now)
    h.feed([inc])
    h.run(lambda: (c := h.engine.state.cases.get(inc.incident_id)) is not None and c.step("cordon", "h2") is not None
          and c.step("cordon", "h2").ended)  # type: ignore[union-attr]
    h.now += timedelta(hours=6)
    h.feed(fleet.train(h.now))
    h.engine.state.compact()
    case = h.engine.state.cases[inc.incident_id]
    assert case.open and JOB in h.engine.state.jobs and h.engine.state.job(JOB).cases[-1] == inc.incident_id
    assert inc.incident_id in h.engine.state.merged  # its trigger stays taken
