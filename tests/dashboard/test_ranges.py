"""The shared time range on the Alerts page and the 3D view (simulated job, real engine)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.dashboard.simdata import HOSTS, JOB, STEPS, STRAGGLER, STRAGGLER_PHASE, SimRun
from vigil.dashboard.queries import alerts, jobs, parallel
from vigil.dashboard.store import Store

pytestmark = pytest.mark.clickhouse


@pytest.fixture
def store(sim_client: Any, sim_run: SimRun) -> Store:
    return Store(client=sim_client)


def _job(store: Store) -> jobs.JobInfo:
    job = jobs.pick_job(jobs.list_jobs(store), JOB)
    assert job is not None
    return job


def test_alerts_keep_the_range_and_what_still_fires(store: Store) -> None:
    # the traffic stall (steps 120-160 of 240) resolved ~80 s before the job's last event
    def current(range_s: int | None) -> set[tuple[str, str]]:
        return {(r["alert"], r["status"]) for r in alerts.current(store, alerts.AlertFilter(job=JOB, range_s=range_s))}

    assert ("traffic_stall", "resolved") in current(None) and ("traffic_stall", "resolved") in current(120)
    recent = current(60)
    assert ("traffic_stall", "resolved") not in recent
    assert {("straggler", "firing"), ("error_log", "firing")} <= recent  # still firing: shown whatever the range
    last_ms = _job(store).last_ms
    everything = alerts.history(store, alerts.AlertFilter(job=JOB))
    lately = alerts.history(store, alerts.AlertFilter(job=JOB, range_s=60))
    assert lately and len(lately) < len(everything)
    assert all(int(r["t_ms"]) >= last_ms - 60_000 for r in lately)
    assert {(r["t_ms"], r["fingerprint"]) for r in lately} <= {(r["t_ms"], r["fingerprint"]) for r in everything}
    assert any(status == "resolved" for _, status in alerts.counts(store, alerts.AlertFilter(job=JOB)))
    assert not any(status == "resolved" for _, status in alerts.counts(store, alerts.AlertFilter(job=JOB,
                                                                                                  range_s=60)))
    # "all jobs" (no job picked): each alert is cut against its own job's clock
    assert {(r["alert"], r["status"]) for r in alerts.current(store, alerts.AlertFilter(range_s=60))} == recent


def test_parallel_view_reads_the_range(store: Store) -> None:
    job = _job(store)
    whole = jobs.job_window(job, None)
    v = parallel.parallel_view(store, whole, phase=STRAGGLER_PHASE)
    assert v.last_step == STEPS - 1 and v.stride == 5  # 240 steps read as 48, every 5th
    assert {r.host for r in v.ranks if r.dev > 0.1} == {STRAGGLER}
    # the first 20 s: before the straggler starts (step 40), nobody is slow
    early = parallel.parallel_view(store, replace(whole, end_ms=job.first_ms + 20_000), phase=STRAGGLER_PHASE)
    assert len(early.ranks) == HOSTS * 4 and early.stride == 1 and early.last_step < 40
    assert max(r.dev for r in early.ranks) < 0.05
    nothing = parallel.parallel_view(store, replace(whole, start_ms=job.last_ms + 60_000,
                                                    end_ms=job.last_ms + 120_000), phase=None)
    assert nothing.ranks == []
