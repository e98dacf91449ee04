"""Page queries over the simulated job: the injected faults come out of ClickHouse as the pages show them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.dashboard.simdata import (
    HOSTS,
    JOB,
    STALL_HOST,
    STALL_NIC,
    STEPS,
    STRAGGLER,
    STRAGGLER_PHASE,
    XID_HOST,
    SimRun,
)
from vigil.dashboard.app import RENDERERS
from vigil.dashboard.callbacks import render_page
from vigil.dashboard.queries import alerts, heatmap, host, jobs, network, overview, parallel
from vigil.dashboard.settings import DashboardSettings
from vigil.dashboard.store import Store, StoreError

pytestmark = pytest.mark.clickhouse


@pytest.fixture
def store(sim_client: Any, sim_run: SimRun) -> Store:
    return Store(client=sim_client)


def window(store: Store, range_s: int | None = 3600) -> Any:
    job = jobs.pick_job(jobs.list_jobs(store), JOB)
    assert job is not None
    return jobs.job_window(job, range_s)


def test_job_list_and_health(store: Store) -> None:
    listed = jobs.list_jobs(store)
    assert [j.job_id for j in listed] == [JOB]
    assert listed[0].n_hosts == HOSTS and listed[0].world_size == HOSTS * 4
    h = overview.job_health(store)[JOB]
    assert h.steps == STEPS and h.last_step == STEPS - 1
    assert h.ettr is not None and 0.9 < h.ettr <= 1.0
    assert h.hosts_reporting == HOSTS == h.hosts_known
    assert h.alerts["critical"] >= 1 and h.alerts["warning"] >= 1  # xid; straggler
    assert h.last_mfu is not None and 0.2 < h.last_mfu < 0.5
    series = overview.step_series(store, window(store), 100)
    assert 0 < len(series.t_ms) <= 100 and all(ms > 500 for ms in series.step_ms)


def test_heatmap_ranks_the_straggler_first(store: Store) -> None:
    m = heatmap.phase_matrix(store, window(store), rows=3, mode="worst")
    assert m.hosts[0] == STRAGGLER and len(m.hosts) == 3 and m.hosts_total == HOSTS
    worst = max((c for c in m.cells if not c.waiting), key=lambda c: c.dev)
    assert (worst.host, worst.col) == (STRAGGLER, STRAGGLER_PHASE) and worst.dev > 0.1
    # waiting is attributed to who caused it: the others wait longer in grad_sync, and it is the
    # straggler's grad_sync cell that is red; the hosts that waited read ~0
    every = heatmap.phase_matrix(store, window(store), rows=HOSTS, mode="all")
    sync = {c.host: c for c in every.cells if c.col == "grad_sync"}
    assert all(c.waiting for c in sync.values()) and sync[STRAGGLER].dev > 0.1
    assert max(abs(c.dev) for h, c in sync.items() if h != STRAGGLER) < 0.05
    assert heatmap.phase_kinds(store, window(store))["grad_sync"] == "comm"
    by_name = heatmap.phase_matrix(store, window(store), rows=3, mode="name")
    assert by_name.hosts == sorted(by_name.hosts) and len(by_name.hosts) == HOSTS
    w = heatmap.window_matrix(store, window(store), phase=STRAGGLER_PHASE, rows=4, mode="worst", max_cols=10)
    assert w.hosts[0] == STRAGGLER and len(w.cols) <= 10 and w.steps_per_col % 5 == 0
    early = [c for c in w.cells if c.host == STRAGGLER and c.col == w.cols[0]]
    late = [c for c in w.cells if c.host == STRAGGLER and c.col == w.cols[-1]]
    assert abs(early[0].dev) < 0.05 < late[0].dev  # slow from step 40 on, not before


def test_host_view(store: Store) -> None:
    v = host.host_view(store, window(store), XID_HOST, max_points=200)
    assert v.identity is not None and v.identity["gpus"] == 4
    assert {s.name for s in v.nics} == {"mlx5_0 port 1", "mlx5_1 port 1"} and len(v.gpus) == 4
    assert {s.name for s in v.throttle} <= {"sw_power_cap"}  # the benign power cap, no slowdown
    assert any(r["category"] == "xid" and r["xid"] == 79 for r in v.logs)
    assert sum(v.heartbeats.values["beats"]) > 0
    cells = heatmap.host_phases(store, window(store), STRAGGLER)
    assert max((c for c in cells if not c.waiting), key=lambda c: c.dev).col == STRAGGLER_PHASE
    assert next(c for c in cells if c.col == "grad_sync").dev > 0.1  # the waiting it caused


def test_host_fault_history_is_what_the_hardware_reported(store: Store) -> None:
    from vigil.dashboard.queries import faults

    fh = faults.fault_history(store, JOB, XID_HOST)
    (xid,) = [r for r in fh.facts if r["category"] == "xid"]
    assert (xid["xid"], xid["sources"], xid["action"], xid["severity"]) == (79, "kernel", "reboot_then_check",
                                                                            "critical")
    assert xid["lines"] >= 4 and xid["first_ms"] <= xid["last_ms"] and xid["gpu"] is not None
    assert all(set(r["sources"].split(",")) <= set(faults.ATTESTED) for r in fh.facts)
    assert fh.cordons == []  # the simulated job ran without a controller
    assert faults.fault_history(store, JOB, STRAGGLER).facts == []  # a slow host is no hardware fault
    body, _ = render_page(store, DashboardSettings(), RENDERERS, "/host", f"?job={JOB}&host={XID_HOST}")
    text = str(body.to_plotly_json())
    assert "Hardware fault history" in text and "reboot_then_check" in text and "never cordoned" in text


def test_network_finds_the_stall(store: Store) -> None:
    v = network.network_view(store, window(store), max_points=400)
    assert [(s.host, s.device, s.kind) for s in v.stalls] == [(STALL_HOST, STALL_NIC, "stop")]
    assert (v.series[0].host, v.series[0].device) == (STALL_HOST, STALL_NIC)
    one = network.network_view(store, window(store), max_points=400, host=STALL_HOST)
    assert {s.host for s in one.series} == {STALL_HOST}


def test_alert_filters_are_bound_parameters(store: Store) -> None:
    everything = alerts.current(store, alerts.AlertFilter(job=JOB))
    assert {(r["alert"], r["host"]) for r in everything} >= {
        ("straggler", STRAGGLER), ("traffic_stall", STALL_HOST), ("error_log", XID_HOST)}
    crit = alerts.current(store, alerts.AlertFilter(job=JOB, severity="critical"))
    assert crit and all(r["severity"] == "critical" for r in crit)
    hostile = alerts.AlertFilter(job="x' OR 1=1 --", host="'; DROP TABLE alert_events; --")
    assert alerts.current(store, hostile) == [] and alerts.history(store, hostile) == []
    assert alerts.history(store, alerts.AlertFilter(job=JOB))  # still there
    opts = alerts.options(store, JOB)
    assert {"straggler", "traffic_stall", "error_log"} <= set(opts.kinds)


def test_parallel_view_lays_out_ranks(store: Store) -> None:
    v = parallel.parallel_view(store, window(store), phase=STRAGGLER_PHASE)
    assert len(v.ranks) == HOSTS * 4 and v.last_step == STEPS - 1
    slow = {r.host for r in v.ranks if r.dev > 0.1}
    assert slow == {STRAGGLER}
    r = next(r for r in v.ranks if r.host == STRAGGLER)
    assert parallel.host_at(store, JOB, dp=r.dp, pp=r.pp, tp=r.tp) == STRAGGLER
    # grad_sync: longest on the ranks that wait for the straggler; shown as the waiting each rank caused
    assert "grad_sync" in heatmap.waiting_phases(store, window(store))
    sync = parallel.parallel_view(store, window(store), phase="grad_sync", waiting_phases=frozenset({"grad_sync"}))
    assert {r.host for r in sync.ranks if r.dev > 0.1} == {STRAGGLER}
    assert max(r.dev for r in sync.ranks if r.host != STRAGGLER) < 0.05
    raw = parallel.parallel_view(store, window(store), phase="grad_sync")
    assert all(r.dev < 0 for r in raw.ranks if r.host == STRAGGLER)  # it waited least: not the one painted red


def test_every_page_renders_server_side(store: Store) -> None:
    settings = DashboardSettings()
    for path in RENDERERS:
        body, title = render_page(store, settings, RENDERERS, path, f"?job={JOB}&host={STRAGGLER}")
        text = str(body.to_plotly_json())
        assert "store-error" not in text, path
        assert title


class Failing:
    def query(self, sql: str, parameters: dict[str, Any] | None = None) -> Any:
        raise RuntimeError("Code: 60. DB::Exception: Table vigil.job_clock does not exist\nstack trace...")


def test_store_errors_become_messages() -> None:
    store = Store(client=Failing())
    with pytest.raises(StoreError, match="could not load the job list from ClickHouse: Code: 60"):
        jobs.list_jobs(store)
    for path in RENDERERS:
        body, _ = render_page(store, DashboardSettings(), RENDERERS, path, "")
        text = str(body.to_plotly_json())
        assert "store-error" in text and "does not exist" in text and "stack trace" not in text
    assert store.errors == len(RENDERERS) + 1 and store.last_error
