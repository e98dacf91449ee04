"""A job's runs (epochs): baselines relative to the run's own start, restarts recognised as such."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.support.crafted import T0, steps
from tests.support.detectors import load, run
from vigil.analyzer.detect.base import Epoch
from vigil.analyzer.detect.epoch import SpanRow, fold
from vigil.analyzer.ingest.processors import process
from vigil.analyzer.settings import EpochSettings
from vigil.contract import Alert, Event, JobRegistered, RankPlacement, RecoveryAction


def span(at_s: int, lo: int, hi: int) -> SpanRow:
    b = T0 + timedelta(seconds=at_s)
    return SpanRow(bucket=b, min_step=lo, max_step=hi, first_ts=b + timedelta(seconds=0.5),
                   last_ts=b + timedelta(seconds=9.5))


def reasons(epochs: list[Epoch]) -> list[tuple[str, int]]:
    return [(e.reason, e.first_step) for e in epochs]


@pytest.mark.pure
def test_runs_begin_where_steps_go_back_jump_resume_after_a_gap_or_the_job_registers_again() -> None:
    s = EpochSettings(gap_s=120, back_steps=2, jump_steps=1000)
    climbing = [span(10 * i, 4800 + 10 * i, 4809 + 10 * i) for i in range(5)]
    assert reasons(fold(climbing, [], s)) == [("start", 4800)]  # a job that begins at 4800 is one run
    back = [*climbing, span(80, 4820, 4825), span(90, 4826, 4835)]  # restarted from the checkpoint at 4820
    assert reasons(fold(back, [], s)) == [("start", 4800), ("step_back", 4820)]
    ranks_straddle = [span(0, 0, 9), span(10, 9, 19)]  # a step's ranks on both sides of a bucket edge
    assert reasons(fold(ranks_straddle, [], s)) == [("start", 0)]
    jump = [*climbing, span(50, 9000, 9009)]
    assert reasons(fold(jump, [], s)) == [("start", 4800), ("step_jump", 9000)]
    gap = [*climbing, span(300, 4850, 4859)]  # restarted right after a checkpoint: steps go on, after 4 min
    assert reasons(fold(gap, [], s)) == [("start", 4800), ("gap", 4850)]
    reg = T0 + timedelta(seconds=55)
    again = fold([*climbing, span(60, 4850, 4859)], [T0 - timedelta(seconds=30), reg], s)
    assert reasons(again) == [("start", 4800), ("registration", 4850)]
    assert again[0].start == T0 - timedelta(seconds=30) and again[1].start == reg


@pytest.mark.pure
def test_the_recovery_controllers_restart_is_stored_as_a_registration() -> None:
    restart = RecoveryAction(job_id="j", host="ctl", ts=T0, action="restart", target="j", status="started",
                             details={"hosts": ["h2", "h1"]})

    def registrations(e: Event) -> list[dict[str, object]]:
        return [row for table, row in process(e) if table == "job_registrations"]

    assert registrations(restart) == [{"job_id": "j", "ts": T0, "event_id": restart.event_id, "hosts": ["h1", "h2"]}]
    for other in (restart.model_copy(update={"status": "succeeded"}), restart.model_copy(update={"action": "cordon"})):
        assert registrations(other) == []


def decay(n: int, from_step: int = 100) -> dict[int, dict[str, float]]:
    return {k: {"forward": 1 + 0.5 * min(1.0, (k - from_step) / 50)} for k in range(from_step, n)}


def firing(alerts: list[Alert], alert: str = "mfu_drift") -> list[Alert]:
    return [a for a in alerts if a.alert == alert and a.status == "firing"]


@pytest.mark.clickhouse
def test_mfu_drift_of_a_job_resumed_at_step_4800_fires_as_soon_as_from_step_0(clickhouse_dsn: str,
                                                                             database: str) -> None:
    load(clickhouse_dsn, database, [*steps("from0", 16, 140, phase_factor=decay(140), seed=7, step_s=0.5),
                                    *steps("from4800", 16, 140, phase_factor=decay(140), seed=7, first_step=4800,
                                           step_s=0.5)])
    at0, at4800 = firing(run(clickhouse_dsn, database, "from0")), firing(run(clickhouse_dsn, database, "from4800"))
    assert at0 and at4800, "the drift is found from step 0 and from step 4800"
    assert at4800[0].ts == at0[0].ts  # same data, same instant: same latency
    ev = at4800[0].evidence
    assert ev["baseline_steps"] == [4820, 4869] and ev["run"]["first_step"] == 4800
    assert "steps 4820-4869" in at4800[0].summary and ev["current_steps"][1] >= 4910


@pytest.mark.clickhouse
@pytest.mark.parametrize("signal", ["registration", "recovery"])
def test_a_restart_from_a_checkpoint_takes_a_fresh_baseline(clickhouse_dsn: str, database: str, signal: str) -> None:
    """Run 1 decays and is restarted from the checkpoint at step 120 a minute later — the job registers again, or
    the recovery controller's restart begins; run 2 is healthy at first, then decays the same way: its drift is
    judged against its own baseline."""
    first = steps("rs", 8, 140, phase_factor=decay(140), seed=3, step_s=0.5)
    end = max(e.ts for e in first)
    start2 = end + timedelta(seconds=60)
    second = steps("rs", 8, 140, phase_factor=decay(140), seed=3, first_step=120, start=start2, step_s=0.5)
    restart: Event = JobRegistered(
        job_id="rs", host="h0000", ts=start2, world_size=16, tp=2, dp=8,
        ranks=[RankPlacement(rank=r, host=f"h{r // 2:04d}", local_rank=r % 2) for r in range(16)],
    ) if signal == "registration" else RecoveryAction(
        job_id="rs", host="controller", ts=start2, action="restart", target="rs", status="started",
        details={"hosts": [f"h{h:04d}" for h in range(8)]})
    load(clickhouse_dsn, database, [*first, restart, *second])
    events = [a for a in run(clickhouse_dsn, database, "rs") if a.alert == "mfu_drift"]
    alerts = [a for i, a in enumerate(events) if i == 0 or a.status != events[i - 1].status]  # not the refreshes
    assert [a.status for a in alerts] == ["firing", "resolved", "firing"], [(a.status, a.ts) for a in events]
    fired, resolved, again = alerts
    assert fired.evidence["baseline_steps"] == [20, 69] and fired.evidence["run"]["reason"] == "start"
    assert start2 <= resolved.ts <= start2 + timedelta(seconds=30)  # the new run is not judged on the old one
    assert again.evidence["baseline_steps"] == [140, 189] and again.evidence["run"]["reason"] == "registration"
    assert again.ts - start2 == fired.ts - T0  # the same latency in the new run as in the first


@pytest.mark.clickhouse
def test_a_bucket_folded_before_its_rows_landed_is_folded_again(clickhouse_dsn: str, database: str) -> None:
    # The job's first bucket lands after the tracker folded the buckets around it (a late host, or a read
    # while the insert that carries it wrote its views): live must converge to what a fresh fold (replay) finds.
    from vigil.analyzer.detect.base import bucket_of
    from vigil.analyzer.detect.epoch import EpochTracker
    from vigil.analyzer.ingest.writer import ClickHouseWriter
    from vigil.clickhouse.client import connect

    evs = steps("late0", 4, 60, seed=3)
    early = [e for e in evs if bucket_of(e.ts) == bucket_of(evs[0].ts)]
    w = ClickHouseWriter(client=connect(clickhouse_dsn, database=database))
    w.write([e for e in evs if e not in early])
    client = connect(clickhouse_dsn, database=database)
    tracker = EpochTracker(job="late0", settings=EpochSettings())
    at = T0 + timedelta(seconds=50)
    before = tracker.at(client, at)
    assert before is not None and before.first_step == max(e.step for e in early) + 1  # the run seen without them
    assert tracker.at(client, at + timedelta(seconds=2)) == before and tracker.refolds == 0  # nothing changed
    w.write(early)
    after = tracker.at(client, at + timedelta(seconds=4))
    assert after is not None and after.first_step == 0 and tracker.refolds == 1
    assert after == EpochTracker(job="late0", settings=EpochSettings()).at(client, at + timedelta(seconds=4))
