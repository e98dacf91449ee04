"""DashboardService as `vigil up` hosts it (its pages fetched over HTTP), and the `vigil dashboard` command line."""

from __future__ import annotations

import urllib.request
from typing import Any

import pytest

from tests.dashboard.simdata import HOSTS, JOB, STEPS, STRAGGLER, SimRun
from tests.support.dashhttp import figure_of, find, render_page, texts
from vigil.app.cli.main import build_parser
from vigil.dashboard.service import DashboardService
from vigil.dashboard.settings import DashboardSettings
from vigil.service import StackContext
from vigil.settings import VigilSettings

pytestmark = pytest.mark.clickhouse


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return resp.status, resp.read().decode()


def test_service_serves_and_stops(sim_client: Any, tmp_path: Any) -> None:
    ctx = StackContext(settings=VigilSettings(home=tmp_path), bootstrap="127.0.0.1:9", clickhouse=sim_client,
                       clickhouse_dsn="chdb:///unused")
    svc = DashboardService(ctx, settings=DashboardSettings(port=0))
    svc.start()
    try:
        health = svc.health()
        url = health["urls"]["dashboard"]
        assert health["ok"] and url.startswith("http://127.0.0.1:") and not url.endswith(":0/")
        assert get(url + "healthz") == (200, "ok")
        status, body = get(url + "heatmap?job=x")
        assert status == 200 and "vigil" in body
        status, layout = get(url + "_dash-layout")
        assert status == 200 and '"url"' in layout and "job-select" in layout
    finally:
        svc.stop()
    assert not svc.health()["ok"]


def test_cli_registers_dashboard_command() -> None:
    args = build_parser().parse_args(["dashboard", "--host", "0.0.0.0", "--port", "0", "--refresh", "5"])
    assert (args.host, args.port, args.refresh_s) == ("0.0.0.0", 0, 5.0)
    assert callable(args.handler)


def test_busy_port_is_reported_not_raised(sim_client: Any) -> None:
    first = DashboardService(client=sim_client, settings=DashboardSettings(port=0))
    first.start()
    try:
        second = DashboardService(client=sim_client, settings=DashboardSettings(port=first.port))
        second.start()
        health = second.health()
        assert not health["ok"] and "cannot listen" in health["error"] and "urls" not in health
        second.stop()
    finally:
        first.stop()


def test_pages_render_over_http(sim_client: Any, sim_run: SimRun) -> None:
    """What the browser gets from the `render` callback: the simulated job's steps, straggler and ranks."""
    svc = DashboardService(client=sim_client, settings=DashboardSettings(port=0))
    svc.start()
    try:
        url = svc.health()["urls"]["dashboard"]
        overview = render_page(url, "/overview", f"?job={JOB}&range=all")
        steps = figure_of(overview, "step-graph")["data"]
        assert steps and len(steps[0]["x"]) > 0 and all(ms > 500 for ms in steps[0]["y"])
        assert find(overview, "jobs-table") is not None and str(STEPS - 1) in texts(overview)
        heat = figure_of(render_page(url, "/heatmap", f"?job={JOB}&range=all"),
                         {"type": "host-click", "page": "heatmap"})
        assert heat["data"][0]["y"][0] == STRAGGLER
        ranks = figure_of(render_page(url, "/parallel", f"?job={JOB}"), {"type": "host-click", "page": "parallel"})
        assert sum(z is not None for row in ranks["data"][0]["z"] for z in row) == HOSTS * 4
        assert figure_of(render_page(url, "/overview", "?job=no-such-job"), "step-graph")["data"] == []
    finally:
        svc.stop()
