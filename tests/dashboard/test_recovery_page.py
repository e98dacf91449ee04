"""The Recovery page from real ClickHouse rows: a recovery the real controller engine ran (recstory.py),
ingested by the analyzer's own processors and writer, read back by the page's queries and rendered."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.recstory import CULPRIT, JOB, Story, load, story
from tests.dashboard.simdata import simulate
from vigil.dashboard.queries import recovery as q
from vigil.dashboard.store import Store

pytestmark = pytest.mark.clickhouse
STRAGGLER = "sim-host-0001"


@pytest.fixture(scope="module")
def told(tmp_path_factory: pytest.TempPathFactory) -> Story:
    return story(tmp_path_factory.mktemp("rec"))


@pytest.fixture(scope="module")
def store(clickhouse_dsn: str, told: Story) -> Store:
    from vigil.app.components import migrate_all
    from vigil.clickhouse.client import connect

    client: Any = connect(clickhouse_dsn, database=f"t_rec_{uuid.uuid4().hex[:8]}")
    migrate_all(client, 3650)  # the fleet's fixed dates: kept past the 30-day TTL (tests/conftest.py)
    load(client, told.events)
    load(client, told.events)  # delivered twice: the page must not count anything twice
    simulate(client, job=JOB, hosts=2, steps=30, faults=[f"straggler:host={STRAGGLER},phase=forward,start=20,magnitude=2"])
    return Store(client=client)


def test_the_recovery_with_its_steps_timings_and_outcome(store: Store, told: Story) -> None:
    recs = q.recoveries(store, JOB)
    rec = next(r for r in recs if r.incident_id == told.incident_id)
    assert (rec.cls, rec.category, rec.culprits) == ("hardware", "host_fault", [CULPRIT])
    assert rec.plan == ["pause", "diagnose", "cordon", "restart"]
    steps = {(s["action"], s["target"]): s for s in rec.steps}
    for key in (("pause", JOB), ("diagnose", JOB), ("cordon", CULPRIT), ("restart", JOB)):
        assert steps[key]["state"] == "succeeded", key
        assert steps[key]["duration_ms"] is not None, key
    assert all(s["action"] not in ("stop", "start") or s["target"] == JOB for s in rec.steps), "agent acks left out"
    o = rec.outcome
    assert o is not None and o["result"] == "resumed" and list(o["cordoned"]) == [CULPRIT]
    assert (o["checkpoint_step"], o["first_step"], o["detect_s"]) == (10, 11, 2.0)
    assert o["steps_lost"] is not None and o["steps_lost"] > 0 and o["restart_s"] is not None
    assert q.halted(recs) is None and not rec.awaiting_approval


def test_current_cordons_and_goodput_agree_with_the_controller(store: Store, told: Story) -> None:
    from vigil.dashboard.queries.overview import job_health
    from vigil.recovery.controller.goodput import job_costs
    from vigil.recovery.controller.report import history

    (cordon,) = q.cordons(store)
    assert (cordon["target"], cordon["incident"], cordon["who"]) == (CULPRIT, told.incident_id, "controller")
    mine = q.goodput(store, JOB, q.recoveries(store, JOB))
    health = job_health(store)[JOB]
    assert mine is not None and mine.ratio == health.ettr and health.ideal_step_ms is not None
    assert mine.step_ms == round(health.ideal_step_ms, 3)
    assert mine.costs == job_costs(told.state, told.state.job(JOB), health.ideal_step_ms)
    assert 0 < mine.ratio < 1 and mine.iterations == 30 and health.median_step_ms is not None
    assert mine.step_ms < health.median_step_ms, "the straggler's slowed steps are not the ideal step time"
    figures = {"effective_ratio": mine.ratio, "iterations": mine.iterations, "step_ms": mine.step_ms,
               "wall_s": mine.wall_s}
    assert history(told.state, told.now, JOB, ettr={JOB: figures})["jobs"][JOB]["effective_ratio"] == mine.ratio
    states = {m["host"]: m["agent_state"] for m in q.members(store, JOB)}
    assert states == {h: m.state for h, m in told.state.job(JOB).members.items()}
    assert states["h0"] == states["h1"] == "training" and states[CULPRIT] != "training"
    copies = {m["host"]: (m["buddy"], m["pushed"], m["buddy_step"], m["refused"]) for m in q.members(store, JOB)}
    assert copies["h0"] == ("h1", 12, 12, {"io": 1}) and copies["h1"] == ("", 0, None, {})


def test_the_page_tells_the_story_read_only(store: Store, told: Story) -> None:
    from tests.support.dashhttp import find, render_page, texts
    from vigil.dashboard.service import DashboardService
    from vigil.dashboard.settings import DashboardSettings

    svc = DashboardService(client=store.client, settings=DashboardSettings(port=0))
    svc.start()
    try:
        page = render_page(svc.url, "/recovery", f"?job={JOB}")
        over = " ".join(texts(render_page(svc.url, "/overview", f"?job={JOB}")))
    finally:
        svc.stop()
    shown = " ".join(texts(page))
    assert "12 to h1 (3 MiB, step 12); refused io 1" in shown  # the agents table: h0's snapshot copies
    assert told.incident_id in shown and "resumed" in shown and f"cordoned {CULPRIT}" in shown
    assert "from checkpoint step 10 (first step 11)" in shown
    g = q.goodput(store, JOB, q.recoveries(store, JOB))
    assert g is not None and "effective training time ratio" in shown and f"{g.ratio:.1%}" in shown
    assert "effective training time ratio" in over and f"{g.ratio:.1%}" in over, "the two pages agree"
    for what in ("detect", "decide", "pause", "diagnose", "restart", "checkpoint load", "steps lost"):
        assert what in shown, what
    cordon = find(page, {"type": "rec-act", "action": "cordon", "target": "h0", "job": JOB})
    uncordon = find(page, {"type": "rec-act", "action": "uncordon", "target": CULPRIT, "job": JOB})
    assert cordon is not None and uncordon is not None
    assert cordon["props"]["disabled"] and uncordon["props"]["disabled"], "read-only: buttons disabled"
    assert "read-only" in shown


def test_no_recoveries_is_said_not_blank(store: Store, tmp_path: Path) -> None:
    assert q.recoveries(store, "no-such-job") == []
    assert q.goodput(store, "no-such-job", []) is None


@pytest.mark.browser
def test_in_the_browser_the_story_shows_and_the_buttons_are_disabled(dash_duo: Any, store: Store,
                                                                      told: Story) -> None:
    from vigil.dashboard.app import create_app
    from vigil.dashboard.settings import DashboardSettings

    dash_duo.start_server(create_app(store.client, DashboardSettings(refresh_s=3600)))
    dash_duo.driver.get(f"{dash_duo.server_url}/recovery?job={JOB}")
    dash_duo.wait_for_element("#recoveries .recovery", timeout=30)
    story_text = dash_duo.find_element("#recoveries").text
    assert told.incident_id in story_text and "resumed" in story_text and f"cordoned {CULPRIT}" in story_text
    assert "EFFECTIVE TRAINING TIME RATIO" in dash_duo.find_element("#goodput-stats").text.upper()
    assert CULPRIT in dash_duo.find_element("#rec-cordons").text
    buttons = dash_duo.driver.find_elements_by_css_selector("button.act")
    assert len(buttons) >= 7 and all(not b.is_enabled() for b in buttons)  # cordon+evict x 3 hosts, uncordon
    bar = dash_duo.find_element("#action-bar")
    assert bar.is_displayed() and "read-only" in bar.text
    token = dash_duo.driver.find_element_by_id("rec-token")
    assert not token.is_enabled() and not token.is_displayed(), "read-only: no inputs to type into"
    dash_duo.driver.find_element_by_id("nav-overview").click()  # no action is taken there: no action bar
    dash_duo.wait_for_contains_text("#page-title", "Overview", timeout=30)
    assert not dash_duo.driver.find_element_by_id("action-bar").is_displayed()
    assert [e for e in (dash_duo.get_logs() or []) if e.get("level") == "SEVERE"] == []


def test_the_latest_advice_shows_with_its_curve_hosts_and_the_previous_score(store: Store, told: Story) -> None:
    from datetime import timedelta

    from tests.support.dashhttp import render_page, texts
    from vigil.contract import Advice, AdvicePoint, AdviceScore
    from vigil.dashboard.queries import advice as qa
    from vigil.dashboard.service import DashboardService
    from vigil.dashboard.settings import DashboardSettings

    assert qa.latest(store, JOB) is None
    at = told.now
    curve = [AdvicePoint(nodes=n, throughput=t, steps=30) for n, t in ((2, 2000.0), (3, 2100.0))]
    old = Advice(job_id=JOB, host="advisor", ts=at - timedelta(minutes=5), advice_id="adv-old", nodes=3, current=3,
                 predicted=2100.0, curve=curve)
    new = Advice(job_id=JOB, host="advisor", ts=at, advice_id="adv-new", nodes=2, current=3, predicted=2000.0,
                 curve=curve, hot=["h1"], data_share=0.125, reasons=["recommend 2 nodes: going to 3 adds 10%"],
                 scored=AdviceScore(advice_id="adv-old", advised_at=old.ts, nodes=3, predicted=2100.0,
                                    measured=1995.0, error_pct=-5.0))
    load(store.client, [new, old])
    got = qa.latest(store, JOB)
    assert got is not None and got["advice_id"] == "adv-new" and got["scored"]["error_pct"] == -5.0
    assert [p["nodes"] for p in got["curve"]] == [2, 3]
    svc = DashboardService(client=store.client, settings=DashboardSettings(port=0))
    svc.start()
    try:
        shown = " ".join(texts(render_page(svc.url, "/recovery", f"?job={JOB}")))
    finally:
        svc.stop()
    for what in ("recommended nodes", "2,000/s", "12.5% of step time", "-5.0 %", "hot: h1",
                 "recommend 2 nodes: going to 3 adds 10%", "adv-new"):
        assert what in shown, what


def test_the_ledger_sums_to_the_wall_clock_and_implies_the_pages_ettr(store: Store) -> None:
    from vigil.dashboard.queries.ledger import job_ledger
    from vigil.dashboard.queries.overview import job_health

    health = job_health(store)[JOB]
    whole = job_ledger(store, JOB)
    assert whole is not None and whole.balanced(), whole  # the ranks' mean step times vs their clock: within 0.5 %
    assert whole.ettr == pytest.approx(health.ettr, rel=1e-4) and whole.seconds["slowdown"] > 0, whole
    recent = job_ledger(store, JOB, 10.0)  # the last 10 s of the job's clock: the straggler's slowed steps
    assert recent is not None and recent.wall_s == pytest.approx(10.0) and recent.balanced(), recent
    assert recent.seconds["slowdown"] > 0 and recent.seconds["productive"] < whole.seconds["productive"]
    culprit, charged = next(iter(recent.slowdown_by.items()))  # most charged first
    assert culprit == STRAGGLER and charged >= 0.9 * recent.seconds["slowdown"], recent.slowdown_by
    assert job_ledger(store, "no-such-job") is None
    from vigil.app.cli.goodput import format_ledgers

    text = format_ledgers(JOB, {"5m": recent, "all": whole}).splitlines()  # `vigil goodput --job J`
    ettr = next(line for line in text if line.startswith("ETTR")).split()
    assert ettr[1:] == [f"{recent.ettr:.1%}", f"{whole.ettr:.1%}"]
    assert next(line for line in text if line.startswith("slowdown")).split()[1:3] == [
        f"{recent.seconds['slowdown']:.1f}", f"{recent.seconds['slowdown'] / 10:.1%}"]
    assert f"5m: slowdown charged to {STRAGGLER} {charged:.1f} s" in text
