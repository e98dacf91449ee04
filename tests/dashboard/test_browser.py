"""The dashboard in headless Chromium over a simulated job that went through the real pipeline.

The simulator injected a straggler (backward phase), a NIC traffic stop and Xid errors;
the analyzer's detectors raised their alerts during a replay. These tests check what an
on-call would see: each page renders without browser errors, the straggler is the top
row of the heatmap in the right phase and a click opens its host, the alerts are
listed, the stall is marked, and a failing store shows a message.
"""

from __future__ import annotations

from typing import Any

import pytest
from selenium.webdriver.common.action_chains import ActionChains

from tests.dashboard.simdata import JOB, STALL_HOST, STALL_NIC, STRAGGLER, STRAGGLER_PHASE, XID_HOST, SimRun
from vigil.dashboard.app import create_app
from vigil.dashboard.settings import DashboardSettings

pytestmark = [pytest.mark.browser, pytest.mark.clickhouse]

SETTINGS = DashboardSettings(refresh_s=3600)  # no refresh while a test runs

# page -> element that only appears when the page rendered its data
PAGES = {
    "/overview": "#jobs-table",
    "/heatmap": "#heatmap-panel .js-plotly-plot",
    f"/host?host={STRAGGLER}": "#host-logs, #host-panel .js-plotly-plot",
    "/network": "#stalls-table",
    "/alerts": "#alerts-table",
    "/parallel": "#parallel-panel .js-plotly-plot",
    "/notifications": "#deliveries-panel",
    "/goodput": "#ledger-table",
}


def severe(dash_duo: Any) -> list[Any]:
    return [e for e in (dash_duo.get_logs() or []) if e.get("level") == "SEVERE"]


def open_page(dash_duo: Any, path: str, ready: str) -> None:
    sep = "&" if "?" in path else "?"
    dash_duo.driver.get(f"{dash_duo.server_url}{path}{sep}job={JOB}")
    dash_duo.wait_for_element(ready, timeout=30)


def graph_data(dash_duo: Any, css: str) -> Any:
    dash_duo.wait_for_element(f"{css} .main-svg", timeout=30)
    return dash_duo.driver.execute_script(
        "const g = document.querySelector(arguments[0]); return {data: g.data, layout: g.layout};", css)


def test_every_page_renders_with_data(dash_duo: Any, sim_client: Any, sim_run: SimRun) -> None:
    dash_duo.start_server(create_app(sim_client, SETTINGS))
    for path, ready in PAGES.items():
        open_page(dash_duo, path, ready)
        assert not dash_duo.driver.find_elements_by_css_selector(".store-error"), path
        assert severe(dash_duo) == [], path
    open_page(dash_duo, "/overview", "#job-stats")
    stats = dash_duo.find_element("#job-stats").text
    assert "EFFECTIVE TRAINING TIME RATIO" in stats.upper()
    assert "16/16" in stats  # hosts reporting
    table = dash_duo.find_element("#jobs-table").text
    assert JOB in table and "1 critical" in table
    slowest = dash_duo.find_element("#slowest-hosts").text.splitlines()
    # its own slow phase, or the waiting it made the others do in grad_sync (charged to it, the larger here)
    assert slowest[1].startswith((f"{STRAGGLER} {STRAGGLER_PHASE} +", f"{STRAGGLER} grad_sync +"))
    open_page(dash_duo, "/goodput", "#slowdown-hosts")  # the ledger charges the slowdown to the straggler
    assert dash_duo.find_element("#slowdown-hosts").text.splitlines()[1].startswith(STRAGGLER)
    assert "GPU-HOURS" in dash_duo.find_element("#fleet-panel").text.upper()


def test_heatmap_shows_straggler_and_click_opens_host(dash_duo: Any, sim_client: Any, sim_run: SimRun) -> None:
    dash_duo.start_server(create_app(sim_client, SETTINGS))
    css = "#heatmap-panel .js-plotly-plot"
    open_page(dash_duo, "/heatmap", css)
    fig = graph_data(dash_duo, css)
    trace = fig["data"][0]
    assert trace["y"][0] == STRAGGLER, "worst host is the top row"
    row = trace["z"][0]
    worst_col = max(range(len(row)), key=lambda j: row[j] if row[j] is not None else -1e9)
    assert trace["x"][worst_col] in (STRAGGLER_PHASE, "grad_sync")  # its own phase or the waiting it caused
    assert row[trace["x"].index(STRAGGLER_PHASE)] > 0.05  # its own phase is slow too
    assert row[worst_col] > 10  # percent slower than its peers
    others = [r[worst_col] for r in trace["z"][1:]]
    assert max(others) < 5

    click_cell(dash_duo, css, 0, worst_col)  # the straggler's cell: top row, its phase column
    dash_duo.wait_for_element("#host-panel", timeout=30)
    assert "/host" in dash_duo.driver.current_url and f"host={STRAGGLER}" in dash_duo.driver.current_url
    assert f"job={JOB}" in dash_duo.driver.current_url
    dash_duo.wait_for_contains_text("#host-alerts", f"{STRAGGLER}/{STRAGGLER_PHASE}", timeout=30)
    assert severe(dash_duo) == []


def click_cell(dash_duo: Any, css: str, row: int, col: int) -> None:
    trace = graph_data(dash_duo, css)["data"][0]
    plot = dash_duo.find_element(f"{css} .nsewdrag")
    w, h = plot.size["width"], plot.size["height"]
    x = int((col + 0.5) * w / len(trace["x"]))
    y = int((row + 0.5) * h / len(trace["y"]))
    ActionChains(dash_duo.driver).move_to_element_with_offset(plot, x, y).click().perform()


def test_3d_view_singles_out_the_straggler_ranks(dash_duo: Any, sim_client: Any, sim_run: SimRun) -> None:
    dash_duo.start_server(create_app(sim_client, SETTINGS))
    css = "#parallel-panel .js-plotly-plot"
    open_page(dash_duo, f"/parallel?phase={STRAGGLER_PHASE}", css)
    trace = graph_data(dash_duo, css)["data"][0]
    z = trace["z"]
    hot = {(i, j) for i, row in enumerate(z) for j, val in enumerate(row) if val is not None and val > 10}
    cols = {j for _, j in hot}
    assert len(cols) == 1 and len(hot) == len(z), "every tensor rank of one dp index (one host) is slow"
    click_cell(dash_duo, css, 0, cols.pop())  # selects that rank; its panel links to its host
    dash_duo.wait_for_contains_text("#rank-panel", f"on {STRAGGLER}", timeout=30)
    assert "rank=" in dash_duo.driver.current_url
    dash_duo.find_element("#rank-panel a").click()
    dash_duo.wait_for_element("#host-panel", timeout=30)
    assert f"host={STRAGGLER}" in dash_duo.driver.current_url
    assert severe(dash_duo) == []


def test_alerts_page_lists_injected_faults(dash_duo: Any, sim_client: Any, sim_run: SimRun) -> None:
    dash_duo.start_server(create_app(sim_client, SETTINGS))
    open_page(dash_duo, "/alerts", "#alerts-table")
    text = dash_duo.find_element("#alerts-table").text
    for expected in (f"{STRAGGLER}/{STRAGGLER_PHASE}", f"{STALL_HOST}/{STALL_NIC}", f"{XID_HOST}/xid", "straggler",
                     "traffic_stall", "error_log"):
        assert expected in text
    assert "traffic_stall" in dash_duo.find_element("#alert-history").text

    # filters come from the URL and are bound as query parameters
    open_page(dash_duo, "/alerts?severity=critical&status=firing", "#alerts-table")
    text = dash_duo.find_element("#alerts-table").text
    assert f"{XID_HOST}/xid" in text and STRAGGLER not in text
    open_page(dash_duo, f"/alerts?host={STALL_HOST}", "#alerts-table")
    text = dash_duo.find_element("#alerts-table").text
    assert STALL_HOST in text and XID_HOST not in text
    assert severe(dash_duo) == []


def test_network_page_marks_the_stall(dash_duo: Any, sim_client: Any, sim_run: SimRun) -> None:
    dash_duo.start_server(create_app(sim_client, SETTINGS))
    open_page(dash_duo, "/network", "#stalls-table")
    rows = dash_duo.find_element("#stalls-table").text
    assert STALL_HOST in rows and STALL_NIC in rows and "stop" in rows
    fig = graph_data(dash_duo, "#network-graph .js-plotly-plot")
    names = [t.get("name") for t in fig["data"]]
    assert f"{STALL_HOST}/{STALL_NIC}" in names
    shapes = fig["layout"].get("shapes") or []
    assert any(s.get("type") == "rect" for s in shapes), "the stall is shaded"
    assert any(str(n).startswith(f"stall {STALL_HOST}/{STALL_NIC}") for n in names), "stalled samples are marked"
    assert severe(dash_duo) == []


class BrokenClient:
    def query(self, sql: str, parameters: dict[str, Any] | None = None) -> Any:
        raise ConnectionError("Connection refused: clickhouse.internal:8443")


def test_store_error_is_shown_not_a_blank_page(dash_duo: Any) -> None:
    dash_duo.start_server(create_app(BrokenClient(), SETTINGS))
    for path in ("/overview", "/heatmap", "/alerts"):
        dash_duo.driver.get(f"{dash_duo.server_url}{path}")
        dash_duo.wait_for_contains_text(".store-error", "Connection refused", timeout=30)
        assert "could not load" in dash_duo.find_element(".store-error").text
        assert severe(dash_duo) == []
