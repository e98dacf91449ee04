"""Small jobs through the real engine: a 2-host DDP job's slow host stands out on the heatmap;
the effective training time ratio ends at the job's own clock (a hang lowers it, time passing does not);
the host page splits NIC throughput by port and draws GPU throttle reasons."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.dashboard.simdata import simulate
from vigil.contract.telemetry import GpuState, Heartbeat, NicCounters
from vigil.dashboard.queries import heatmap, host, jobs, overview, parallel, trends
from vigil.dashboard.queries.window import to_dt
from vigil.dashboard.store import Store

pytestmark = pytest.mark.clickhouse

PAIR = "pair"  # 2 hosts, pp = 1: the demo's torch job shape
HUNG = "hung"  # steps stop, the agents keep reporting
SLOW = "sim-host-0001"
STEPS = 40
HANG_S = 600


@pytest.fixture(scope="module")
def store(clickhouse_dsn: str) -> Store:
    from vigil.app.components import migrate_all
    from vigil.clickhouse.client import connect

    client: Any = connect(clickhouse_dsn, database=f"t_small_{uuid.uuid4().hex[:8]}")
    migrate_all(client, 30)
    simulate(client, job=PAIR, hosts=2, steps=STEPS,
             faults=[f"straggler:host={SLOW},phase=forward,start=0,magnitude=0.3"])
    _write(client, _second_port_and_throttling(_step_ts(client, PAIR, "min"), PAIR, SLOW))
    hosts, _ = simulate(client, job=HUNG, hosts=2, steps=STEPS, faults=[])
    last = _step_ts(client, HUNG, "max")
    _write(client, [Heartbeat(job_id=HUNG, host=h, ts=last + timedelta(seconds=s), interval_s=2)
                    for h in hosts for s in range(2, HANG_S + 1, 2)])  # the agents report on, no step completes
    return Store(client=client)


def _step_ts(client: Any, job: str, agg: str) -> datetime:
    sql = f"SELECT toUnixTimestamp64Milli({agg}(last_ts)) FROM job_steps WHERE job_id = {{job:String}}"
    return to_dt(client.query(sql, parameters={"job": job}).result_rows[0][0])


def _write(client: Any, events: list[Any]) -> None:
    from vigil.analyzer.ingest.writer import ClickHouseWriter

    ClickHouseWriter(client=client, check_existing=False).write(events)


def _second_port_and_throttling(t0: datetime, job: str, host: str) -> list[Any]:
    """Port 2 of mlx5_0 at 1 GB/s each way; GPUs 0 and 1 throttled (hw_slowdown, 1 also sw_power_cap)."""
    ts = [t0 + timedelta(seconds=s) for s in range(1, 11)]
    nics = [NicCounters(job_id=job, host=host, ts=t, device="mlx5_0", port=2, link="rdma", tx_bytes=0, rx_bytes=0,
                        tx_bps=1e9, rx_bps=1e9, interval_s=1) for t in ts]
    gpus = [GpuState(index=0, throttle_reasons=["hw_slowdown"]),
            GpuState(index=1, throttle_reasons=["hw_slowdown", "sw_power_cap"])]
    return [*nics, *(Heartbeat(job_id=job, host=host, ts=t, interval_s=2, gpus=gpus) for t in ts[::2])]


def _window(store: Store, job: str) -> Any:
    info = jobs.pick_job(jobs.list_jobs(store), job)
    assert info is not None
    return jobs.job_window(info, None)


def test_two_host_job_slow_host_is_positive_and_first(store: Store) -> None:
    m = heatmap.phase_matrix(store, _window(store, PAIR), rows=2, mode="worst")
    assert m.hosts_total == 2 and m.hosts[0] == SLOW
    fwd = {c.host: c for c in m.cells if c.col == "forward"}
    assert fwd[SLOW].dev > 0.2  # ~30% slower than the healthy host, not 0%
    healthy = next(h for h in fwd if h != SLOW)
    assert fwd[SLOW].median_ms == pytest.approx(fwd[healthy].mean_ms)
    assert fwd[healthy].dev == pytest.approx(0.0)
    cells = heatmap.host_phases(store, _window(store, PAIR), SLOW)
    assert max((c for c in cells if not c.waiting), key=lambda c: c.dev).col == "forward"
    assert next(c for c in cells if c.col == "grad_sync").dev > 0.1  # the waiting it caused its peer


def test_two_host_window_view_and_ranks(store: Store) -> None:
    w = heatmap.window_matrix(store, _window(store, PAIR), phase="forward", rows=2, mode="worst")
    assert w.hosts[0] == SLOW and all(c.dev > 0.2 for c in w.cells if c.host == SLOW)
    v = parallel.parallel_view(store, _window(store, PAIR), phase="forward")
    assert {r.host for r in v.ranks if r.dev > 0.2} == {SLOW}  # 8 ranks, half of them slow


def test_ettr_ends_at_the_job_clock(store: Store) -> None:
    health = overview.job_health(store)
    # both jobs ended an hour ago: the wall clock since then does not count
    pair = health[PAIR].ettr
    assert pair is not None and pair > 0.9
    # ~40 s of steps, then 600 s of heartbeats without a step: a hang is lost time
    hung = health[HUNG]
    assert hung.steps == STEPS and hung.ettr is not None and 0.03 < hung.ettr < 0.1


def test_host_page_nics_per_port_and_throttle_reasons(store: Store) -> None:
    v = host.host_view(store, _window(store, PAIR), SLOW, max_points=400)
    assert {s.name for s in v.nics} == {"mlx5_0 port 1", "mlx5_0 port 2", "mlx5_1 port 1"}
    port2 = next(s for s in v.nics if s.name == "mlx5_0 port 2")
    assert port2.values["bps"] and all(b == pytest.approx(2e9) for b in port2.values["bps"])
    port1 = next(s for s in v.nics if s.name == "mlx5_0 port 1")
    assert all(b != pytest.approx(2e9) for b in port1.values["bps"])  # the ports are not mixed
    reasons = {s.name: s for s in v.throttle}
    assert set(reasons) == {"hw_slowdown", "sw_power_cap"}
    assert sum(reasons["hw_slowdown"].values["samples"]) == 10 and set(reasons["hw_slowdown"].values["gpus"]) == {"0,1"}
    assert sum(reasons["sw_power_cap"].values["samples"]) == 5 and set(reasons["sw_power_cap"].values["gpus"]) == {"1"}
    healthy = host.host_view(store, _window(store, PAIR), "sim-host-0000", max_points=400)
    # the simulator's GPUs touch their power cap now and then (benign); no slowdown on the healthy host
    assert {s.name for s in healthy.throttle} <= {"sw_power_cap"} and {s.name for s in healthy.nics} == {"mlx5_0 port 1", "mlx5_1 port 1"}


def test_job_trends_per_job_show_the_hang_as_a_gap(store: Store) -> None:
    t = trends.job_trends(store, None, points=16)  # HUNG: ~40 s of steps + 600 s without, 40 s buckets
    assert set(t) == {PAIR, HUNG}
    assert t[HUNG].step_ms[0] is not None and t[HUNG].step_ms[2:] == [None] * 14 and t[HUNG].mfu[2:] == [None] * 14
    assert all(ms is not None and 900 < ms < 1500 for ms in t[PAIR].step_ms)
    assert all(m is not None and 0 < m < 1 for m in t[PAIR].mfu)
    recent = trends.job_trends(store, 60, points=8)  # each job's own last minute
    assert HUNG not in recent and len(recent[PAIR].step_ms) == 8 and None not in recent[PAIR].step_ms
