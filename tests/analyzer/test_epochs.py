"""A job's runs (epochs): baselines relative to the run's own start, restarts recognised as such."""

from __future__ import annotations

from datetime import timedelta

import pytest
from crafted import T0, steps
from test_detectors import load, run

from vigil.analyzer.detect.base import Epoch
from vigil.analyzer.detect.epoch import SpanRow, fold
from vigil.analyzer.settings import EpochSettings
from vigil.contract import Alert, JobRegistered, RankPlacement


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


def decay(n: int, from_step: int = 100) -> dict[int, dict[str, float]]:
    return {k: {"forward": 1 + 0.5 * min(1.0, (k - from_step) / 50)} for k in range(from_step, n)}


def firing(alerts: list[Alert], alert: str = "mfu_drift") -> list[Alert]:
    return [a for a in alerts if a.alert == alert and a.status == "firing"]


@pytest.mark.clickhouse
def test_mfu_drift_of_a_job_resumed_at_step_4800_fires_as_soon_as_from_step_0(clickhouse_dsn: str,
                                                                             database: str) -> None:
    load(clickhouse_dsn, database, [*steps("from0", 16, 200, phase_factor=decay(200), seed=7),
                                    *steps("from4800", 16, 200, phase_factor=decay(200), seed=7, first_step=4800)])
    at0, at4800 = firing(run(clickhouse_dsn, database, "from0")), firing(run(clickhouse_dsn, database, "from4800"))
    assert at0 and at4800, "the drift is found from step 0 and from step 4800"
    assert at4800[0].ts == at0[0].ts  # same data, same instant: same latency
    ev = at4800[0].evidence
    assert ev["baseline_steps"] == [4820, 4869] and ev["run"]["first_step"] == 4800
    assert "steps 4820-4869" in at4800[0].summary and ev["current_steps"][1] >= 4900


@pytest.mark.clickhouse
def test_a_restart_from_a_checkpoint_takes_a_fresh_baseline(clickhouse_dsn: str, database: str) -> None:
    """Run 1 decays and is restarted from the checkpoint at step 150 a minute later, registering again;
    run 2 is healthy at first, then decays the same way: its drift is judged against its own baseline."""
    first = steps("rs", 16, 190, phase_factor=decay(190), seed=3)
    end = max(e.ts for e in first)
    start2 = end + timedelta(seconds=60)
    second = steps("rs", 16, 200, phase_factor=decay(200), seed=3, first_step=150, start=start2)
    reg = JobRegistered(job_id="rs", host="h0000", ts=start2, world_size=32, tp=2, dp=16,
                        ranks=[RankPlacement(rank=r, host=f"h{r // 2:04d}", local_rank=r % 2) for r in range(32)])
    load(clickhouse_dsn, database, [*first, reg, *second])
    events = [a for a in run(clickhouse_dsn, database, "rs") if a.alert == "mfu_drift"]
    alerts = [a for i, a in enumerate(events) if i == 0 or a.status != events[i - 1].status]  # not the refreshes
    assert [a.status for a in alerts] == ["firing", "resolved", "firing"], [(a.status, a.ts) for a in events]
    fired, resolved, again = alerts
    assert fired.evidence["baseline_steps"] == [20, 69] and fired.evidence["run"]["reason"] == "start"
    assert start2 <= resolved.ts <= start2 + timedelta(seconds=30)  # the new run is not judged on the old one
    assert again.evidence["baseline_steps"] == [170, 219] and again.evidence["run"]["reason"] == "registration"
    assert again.ts - start2 == fired.ts - T0  # the same latency in the new run as in the first

