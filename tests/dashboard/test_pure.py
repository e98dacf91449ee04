"""Pure parts: URL selection, time windows, figure builders (no engine, no browser)."""

from __future__ import annotations

import pytest

from vigil.dashboard.components import sparkline
from vigil.dashboard.figures.heatmap import heatmap_figure
from vigil.dashboard.figures.network import network_figure
from vigil.dashboard.queries.heatmap import Cell, Matrix
from vigil.dashboard.queries.network import NetworkView, NicSeries, Stall
from vigil.dashboard.queries.window import Window, window_for
from vigil.dashboard.selection import Selection, page_href
from vigil.dashboard.settings import DashboardSettings

pytestmark = pytest.mark.pure


def test_selection_round_trips_and_forgives_bad_values() -> None:
    sel = Selection.from_search("?job=j1&range=6h&host=h7&view=window&phase=forward&severity=bogus&x=1")
    assert (sel.job, sel.range, sel.host, sel.view, sel.phase, sel.severity) == ("j1", "6h", "h7", "window",
                                                                                 "forward", None)
    assert Selection.from_search(sel.to_search()) == sel
    assert Selection.from_search("?range=99y").range == "1h"
    assert Selection.from_search("", default_range="24h").range == "24h"
    assert page_href("/network", sel) == "/network?job=j1&range=6h"
    assert page_href("/host", sel, host="h9") == "/host?job=j1&range=6h&host=h9"


def test_window_and_buckets() -> None:
    w = window_for("j", first_ms=0, last_ms=7_200_000, range_s=3600)
    assert (w.start_ms, w.end_ms) == (3_600_000, 7_200_000)
    assert window_for("j", first_ms=5_000_000, last_ms=7_200_000, range_s=3600).start_ms == 5_000_000
    assert w.bucket_s(400) == 10 and w.bucket_s(400, minimum=30) == 30
    assert Window(job="j", start_ms=0, end_ms=1000).bucket_s(400) == 1


def test_heatmap_figure_keeps_row_order_and_hover_values() -> None:
    cells = [Cell(host=h, col=p, mean_ms=m, max_ms=m, n=5, median_ms=100.0, dev=(m - 100) / 100)
             for h, p, m in (("b", "fwd", 130.0), ("b", "bwd", 100.0), ("a", "fwd", 100.0), ("a", "bwd", 99.0))]
    fig = heatmap_figure(Matrix(hosts=["b", "a"], cols=["bwd", "fwd"], cells=cells, hosts_total=2), title="t")
    trace = fig.data[0]
    assert list(trace.y) == ["b", "a"] and list(trace.x) == ["bwd", "fwd"]
    assert trace.z[0][1] == pytest.approx(30.0) and trace.customdata[0][1][1] == 130.0
    assert fig.layout.yaxis.autorange == "reversed"
    assert trace.customdata[0][1][5] == "deviation +30.00%"
    sync = Cell(host="a", col="grad_sync", mean_ms=80.0, max_ms=90.0, n=5, median_ms=100.0, dev=0.2, waiting=True)
    caused = heatmap_figure(Matrix(hosts=["a"], cols=["grad_sync"], cells=[sync], hosts_total=1), title="t").data[0]
    assert caused.z[0][0] == pytest.approx(20.0) and "the others waited +20.0%" in caused.customdata[0][0][5]
    empty = heatmap_figure(Matrix(hosts=[], cols=[], cells=[], hosts_total=0), title="t")
    assert "no phase timings" in empty.layout.annotations[0].text


def test_network_figure_marks_stalls() -> None:
    fleet = [{"t_ms": t, "median_bps": 1e10, "p10_bps": 9e9, "total_bps": 2e10, "nics": 2} for t in (0, 10_000, 20_000)]
    series = [NicSeries(host="h1", device="mlx5_0", t_ms=[0, 10_000, 20_000], bps=[1e10, 0.0, 1e10],
                        ratio=[1.0, 0.0, 1.0])]
    stall = Stall(host="h1", device="mlx5_0", start_ms=10_000, end_ms=20_000, buckets=1, min_ratio=0.0, kind="stop")
    fig = network_figure(NetworkView(bucket_s=10, drop=0.5, fleet=fleet, series=series, stalls=[stall]), title="n")
    assert any(t.name == "stall h1/mlx5_0" and len(t.x) == 1 for t in fig.data)
    assert len(fig.layout.shapes) == 1


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIGIL_DASHBOARD_PORT", "0")
    monkeypatch.setenv("VIGIL_DASHBOARD_REFRESH_S", "30")
    s = DashboardSettings.load()
    assert (s.port, s.refresh_s, s.host) == (0, 30.0, "127.0.0.1")
    assert DashboardSettings.config_section == "dashboard"


def test_sparkline_scales_and_keeps_gaps() -> None:
    assert sparkline([]) == "" and sparkline([None, None]) == ""
    assert sparkline([100.0, None, 200.0, 150.0]) == "▁ █▅"
    assert sparkline([1000.0, 1010.0, 1000.0]) == "▁▁▁"  # 1% noise stays flat
    assert sparkline([1000.0, 1050.0, 1200.0]) == "▁▃█"
    assert sparkline([5.0, 5.0]) == "▁▁" and sparkline([0.0, 0.0]) == "▁▁"
