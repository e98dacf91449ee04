"""The goodput ledger's categories from the analyzer's own rows: a job whose data loader stalled (in the step and
before it), that saved checkpoints and recovered from a fault, written through the analyzer's writer and read by
the ledger's queries; the fleet's GPU-hours and the checkpoint interval the ledger implies, from the same rows."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.dashboard.recstory import load
from vigil.contract import Checkpoint, Outcome, StepTiming
from vigil.contract.ckpt_interval import young_daly_s
from vigil.contract.ledger import CATEGORIES
from vigil.dashboard.store import Store

pytestmark = pytest.mark.clickhouse
JOB = "ledger-job"
T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def events() -> list[Any]:
    """40 steps on 2 ranks: 1 s each; steps 30-34 wait 0.4 s more for data in the step, steps 35-39 load 0.3 s of
    data before the step opens; a 0.5 s save after steps 9, 19, 29; a 3 s recovery before step 25. 48 s."""
    out: list[Any] = []
    t = T0
    for step in range(40):
        if step == 25:
            t += timedelta(seconds=3)
            out.append(Outcome(job_id=JOB, host="controller", ts=t + timedelta(seconds=1), incident_id=f"{JOB}/f",
                               result="resumed", category="host_fault", resumed_at=t + timedelta(seconds=1),
                               detect_s=1.0, restart_s=2.0, checkpoint_load_s=0.5, steps_lost=0))
        ms, phases = 1000.0, {"forward": 600.0, "backward": 300.0, "data": 100.0}
        if 30 <= step < 35:
            ms, phases = 1400.0, {"forward": 600.0, "backward": 300.0, "data": 500.0}
        elif step >= 35:
            t += timedelta(milliseconds=300)
            phases = {"forward": 600.0, "backward": 400.0, "data": 300.0}
        t += timedelta(milliseconds=ms)
        out += [StepTiming(job_id=JOB, host=f"h{r}", rank=r, world_size=2, step=step, step_ms=ms, phases=phases, ts=t)
                for r in range(2)]
        if step in (9, 19, 29):
            out += [Checkpoint(job_id=JOB, host=f"h{r}", rank=r, ts=t, step=step, phase="staged", blocked_ms=500.0)
                    for r in range(2)]
            t += timedelta(milliseconds=500)
    return out


@pytest.fixture(scope="module")
def store(clickhouse_dsn: str) -> Store:
    from vigil.app.components import migrate_all
    from vigil.clickhouse.client import connect

    client: Any = connect(clickhouse_dsn, database=f"t_led_{uuid.uuid4().hex[:8]}")
    migrate_all(client, 3650)
    load(client, events())
    return Store(client=client)


def test_each_category_from_the_stored_rows_sums_to_the_wall_clock(store: Store) -> None:
    from vigil.dashboard.queries.ledger import checkpoint_interval, fleet_ledger, job_ledger

    led = job_ledger(store, JOB)
    assert led is not None and led.wall_s == pytest.approx(48.0, abs=0.01), led
    expect = dict.fromkeys(CATEGORIES, 0.0) | {"productive": 40.0, "data_loader": 5 * 0.4 + 5 * 0.3,
                                                "checkpoint_save": 1.5, "detect": 1.0, "restart": 1.5, "restore": 0.5}
    assert led.seconds == pytest.approx(expect, abs=0.01) and led.balanced(), led
    f = fleet_ledger(store)
    assert f is not None and f.jobs == {JOB: 2.0} and f.balanced()
    assert f.gpu_hours["data_loader"] == pytest.approx(3.5 * 2 / 3600, abs=1e-5)
    recent = fleet_ledger(store, 10.0)  # the fleet's last 10 s: the data-loader stalls
    assert recent is not None and recent.wall_gpu_hours == pytest.approx(10 * 2 / 3600, abs=1e-5)
    from vigil.app.cli.goodput import format_fleet

    text = format_fleet({"10s": recent, "all": f}).splitlines()  # `vigil goodput --fleet`
    assert next(line for line in text if line.startswith("data_loader")).split()[3:5] == [
        f"{f.gpu_hours['data_loader']:.2f}", f"{3.5 / led.wall_s:.1%}"]
    ci = checkpoint_interval(store, JOB)
    assert ci is not None and (ci.failures, ci.save_s, ci.restore_s) == (1, 0.5, 3.0)
    assert ci.current_s == pytest.approx((10.5 + 13.5) / 2) and ci.mtbf_s == pytest.approx(48.0, abs=0.01)
    assert ci.optimal_s == pytest.approx(young_daly_s(0.5, ci.mtbf_s)) and not ci.bound


def test_the_goodput_page_shows_the_same_ledger_the_interval_and_the_fleet(store: Store) -> None:
    from tests.support.dashhttp import find, render_page, texts
    from vigil.contract.ckpt_interval import describe
    from vigil.dashboard.queries.ledger import checkpoint_interval, job_ledger
    from vigil.dashboard.service import DashboardService
    from vigil.dashboard.settings import DashboardSettings

    svc = DashboardService(client=store.client, settings=DashboardSettings(port=0))
    svc.start()
    try:
        page = render_page(svc.url, "/goodput", f"?job={JOB}&range=all")
    finally:
        svc.stop()
    ledger_rows = " | ".join(texts(find(page, "ledger-table")))
    whole = job_ledger(store, JOB)
    assert whole is not None
    assert f"data_loader | 3.5 s ({3.5 / whole.wall_s:.1%})" in ledger_rows, ledger_rows  # the whole job's column
    assert f"{whole.ettr:.1%}" in ledger_rows
    ci = checkpoint_interval(store, JOB)
    assert ci is not None and texts(find(page, "ckpt-interval-line")) == [describe(ci)]
    fleet = " | ".join(texts(find(page, "fleet-table")))
    assert f"data_loader | {3.5 * 2 / 3600:,.2f}" in fleet, fleet
