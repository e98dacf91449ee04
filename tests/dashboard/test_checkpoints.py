"""The job's checkpoints on the dashboard: latest complete one, its age, what each save blocked."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from tests.dashboard.simdata import simulate
from vigil.contract import Checkpoint
from vigil.dashboard.queries import checkpoints, jobs
from vigil.dashboard.queries.window import to_dt
from vigil.dashboard.store import Store

pytestmark = pytest.mark.clickhouse
JOB = "ckpt-job"


def saves(t0: Any, hosts: list[str]) -> list[Checkpoint]:
    """Two ranks save at steps 10 and 20 (committed) and 30 (failed: disk full)."""
    out = []
    for step, ok in ((10, True), (20, True), (30, False)):
        ts = t0 + timedelta(seconds=step)
        for rank, host in enumerate(hosts):
            base = dict(job_id=JOB, host=host, rank=rank, step=step, path=f"/ckpt/{JOB}/step-{step}")
            out.append(Checkpoint(**base, ts=ts, phase="staged", blocked_ms=20.0 + 10 * rank + step, bytes=2**20))
            out.append(Checkpoint(**base, ts=ts + timedelta(seconds=1), phase="persisted" if ok else "failed",
                                  duration_ms=800.0, error="" if ok else "[Errno 28] No space left on device"))
        if ok:
            out.append(Checkpoint(job_id=JOB, host=hosts[0], rank=0, step=step, path=f"/ckpt/{JOB}/step-{step}",
                                  ts=ts + timedelta(seconds=2), phase="committed", duration_ms=900.0))
    return out


@pytest.fixture(scope="module")
def store(clickhouse_dsn: str) -> Store:
    from vigil.analyzer.ingest.writer import ClickHouseWriter
    from vigil.app.components import migrate_all
    from vigil.clickhouse.client import connect

    client: Any = connect(clickhouse_dsn, database=f"t_ckpt_{uuid.uuid4().hex[:8]}")
    migrate_all(client, 30)
    hosts, _ = simulate(client, job=JOB, hosts=2, steps=40, faults=[])
    t0 = to_dt(client.query("SELECT toUnixTimestamp64Milli(min(first_ts)) FROM job_steps").result_rows[0][0])
    assert ClickHouseWriter(client=client).write(saves(t0, hosts)) == []
    return Store(client=client)


def test_latest_complete_checkpoint_and_its_age(store: Store) -> None:
    last = checkpoints.latest(store, JOB)
    assert last is not None
    assert (last.step, last.failed, last.committed) == (20, 2, 2)  # step 30 failed on both ranks
    assert last.age_steps == 39 - 20
    assert last.age_s is not None and last.age_s > 0
    assert checkpoints.latest(store, "no-such-job") is None


def test_each_save_blocked_as_long_as_its_slowest_rank(store: Store) -> None:
    job = next(j for j in jobs.list_jobs(store) if j.job_id == JOB)
    got = checkpoints.saves(store, jobs.job_window(job, None))
    assert [(s.step, s.blocked_ms, s.committed, s.failed) for s in got] == [
        (30, 60.0, False, True), (20, 50.0, True, False), (10, 40.0, True, False)]
    assert "No space left" in got[0].error


def test_the_job_page_shows_them(store: Store) -> None:
    from tests.support.dashhttp import find, render_page, texts
    from vigil.dashboard.service import DashboardService
    from vigil.dashboard.settings import DashboardSettings

    svc = DashboardService(client=store.client, settings=DashboardSettings(port=0))
    svc.start()
    try:
        page = render_page(svc.url, "/overview", f"?job={JOB}")
    finally:
        svc.stop()
    assert find(page, "checkpoint-stats") is not None and find(page, "checkpoint-saves") is not None
    shown = texts(page)
    assert "step 20" in shown and any(t.startswith("19 steps / ") for t in shown)
    assert "failed" in shown and "2 / 0" in shown
