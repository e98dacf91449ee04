"""Incidents on the dashboard: the alerts page groups alerts under them, the 3D view marks the culprit,
dims its victims and shows a selected rank's groups, and the step window exports as a Chrome trace.

The job: 8 ranks as tp=2 x dp=2 x pp=2 (rank = tp + 2 dp + 4 pp, two ranks per host); rank 6
is slow in `forward`; rank 5 hangs (a `collective_hang` incident names it, the other ranks
are its victims, their exit alerts demoted).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.app.cli.trace import export, parse_steps
from vigil.contract import Alert, Incident, ParallelCoords, ProcessExit, RankRef, StepTiming
from vigil.dashboard.app import create_app
from vigil.dashboard.queries import incidents as qi
from vigil.dashboard.queries import parallel as qp
from vigil.dashboard.queries.jobs import job_window, list_jobs, pick_job
from vigil.dashboard.settings import DashboardSettings
from vigil.dashboard.store import Store

pytestmark = pytest.mark.clickhouse
JOB = "hang3d"
T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
CULPRIT, SLOW = 5, 6
IID = f"{JOB}/collective_hang/h0002/r5/20261102T080015"


def coords(rank: int) -> ParallelCoords:
    return ParallelCoords(tp=rank % 2, dp=(rank // 2) % 2, pp=rank // 4)


def host(rank: int) -> str:
    return f"h{rank // 2:04d}"


def ref(rank: int, message: str) -> RankRef:
    return RankRef(host=host(rank), rank=rank, local_rank=rank % 2, coords=coords(rank), message=message)


def events() -> list[Any]:
    out: list[Any] = []
    for step in range(15):
        for r in range(8):
            fwd = 30.0 * (1.5 if r == SLOW else 1.0)
            out.append(StepTiming(job_id=JOB, host=host(r), rank=r, local_rank=r % 2, world_size=8, coords=coords(r),
                                  step=step, step_ms=100.0, phases={"forward": fwd, "backward": 100 - fwd - 10,
                                                                    "optimizer": 10.0},
                                  ts=T0 + timedelta(seconds=step + 1)))
    incident = Incident(
        job_id=JOB, host=host(CULPRIT), ts=T0 + timedelta(seconds=30), incident_id=IID, category="collective_hang",
        cause="unknown", status="open", severity="critical",
        summary="collective hang: h0002 rank 5 never joined gloo:all_reduce",
        culprits=[ref(CULPRIT, "not in gloo:all_reduce [[68]] (group 0 default_pg seq 21); at time.sleep(3600)")],
        victims=[ref(r, "waits in gloo:all_reduce [[68]] (group 0 default_pg seq 21)") for r in range(8) if r != CULPRIT],
        alerts=[f"{JOB}/collective_hang/h0002/rank5", f"{JOB}/process_exit/h0000/rank0"],
        first_sign=T0 + timedelta(seconds=15), detected=T0 + timedelta(seconds=30))
    hang = Alert(job_id=JOB, host=host(CULPRIT), ts=T0 + timedelta(seconds=30), fingerprint=incident.alerts[0],
                 alert="collective_hang", subject="h0002/rank5", status="firing", severity="critical",
                 summary=incident.summary, first_seen=T0 + timedelta(seconds=15), last_seen=T0 + timedelta(seconds=30),
                 evidence={"incident_id": IID, "incident_role": "culprit"})
    victim = Alert(job_id=JOB, host="h0000", ts=T0 + timedelta(seconds=46), fingerprint=incident.alerts[1],
                   alert="process_exit", subject="h0000/rank0", status="firing", severity="warning",
                   summary="h0000 rank 0 exited with exit code 1: Timed out waiting 30000ms",
                   first_seen=T0 + timedelta(seconds=46), last_seen=T0 + timedelta(seconds=46),
                   evidence={"incident_id": IID, "incident_role": "victim", "severity_before": "critical"})
    other = Alert(job_id=JOB, host="h0003", ts=T0 + timedelta(seconds=5), fingerprint=f"{JOB}/straggler/h0003/forward",
                  alert="straggler", subject="h0003/forward", status="firing", severity="warning",
                  summary="h0003 forward is 50% slower", first_seen=T0, last_seen=T0 + timedelta(seconds=5))
    exit_ = ProcessExit(job_id=JOB, host="h0000", ts=T0 + timedelta(seconds=46), rank=0, local_rank=0, pid=10,
                        exit_code=1, summary="RuntimeError: Timed out waiting 30000ms for recv operation")
    return [*out, incident, hang, victim, other, exit_]


@pytest.fixture(scope="module")
def client(clickhouse_dsn: str) -> Any:
    from vigil.app.components import migrate_all
    from vigil.clickhouse.client import connect

    c = connect(clickhouse_dsn, database=f"t_inc_{uuid.uuid4().hex[:8]}")
    migrate_all(c, 3650)  # fixed dates (T0): kept past the 30-day TTL (tests/conftest.py)
    ClickHouseWriter(client=c).write(events())
    return c


def test_queries_give_states_groups_and_the_standout_phase(client: Any) -> None:
    store = Store(client=client)
    job = pick_job(list_jobs(store), JOB)
    assert job is not None
    win = job_window(job, None)
    (inc,) = qi.incidents(store, job=JOB, range_s=None)
    assert inc.incident_id == IID and [c.rank for c in inc.culprits] == [CULPRIT] and len(inc.victims) == 7
    v = qp.parallel_view(store, win, phase=None)
    assert v.auto and v.phase == "forward"  # the whole step is flat; forward is where rank 6 stands out
    assert qp.parallel_view(store, win, phase=qp.STEP).phase == ""
    states = qp.rank_states(v, inc, qp.exits(store, win))
    assert states[CULPRIT].state == "culprit" and states[0].state == "victim"
    assert "time.sleep" in states[CULPRIT].message
    no_incident = qp.rank_states(v, None, qp.exits(store, win))
    assert no_incident[SLOW].state == "slow" and no_incident[0].state == "exited" and no_incident[1].state == "training"
    assert qp.groups_of(v.ranks, 1) == {"tp": [0, 1], "pp": [1, 5], "dp": [1, 3]}


def test_the_step_window_exports_as_a_chrome_trace(client: Any, tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    got = export(client, JOB, parse_steps("5:9"), out)
    doc = json.loads(out.read_text())
    assert got == {"steps": (5, 9), "ranks": 8, "events": len(doc["traceEvents"])}
    events = doc["traceEvents"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert len(threads) == 8 and threads[(0, 5)] == "pp 1 · tp 1 · rank 5 (h0002)"  # one track per rank, by DP replica
    spans = [e for e in events if e["ph"] == "X"]
    assert all(isinstance(e["ts"], (int, float)) and e["dur"] >= 0 for e in spans)
    steps = [e for e in spans if e["cat"] == "step" and e["tid"] == SLOW]
    assert [e["name"] for e in steps] == [f"step {s}" for s in range(5, 10)]
    fwd = next(e for e in spans if e["name"] == "forward" and e["tid"] == SLOW and e["args"]["step"] == 5)
    assert fwd["dur"] == pytest.approx(45_000) and fwd["ts"] == pytest.approx(steps[0]["ts"])
    assert export(client, JOB, None, out)["steps"] == (0, 14)
    with pytest.raises(ValueError, match="no steps"):
        export(client, JOB, (100, 120), out)
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        parse_steps("9:5")


def graph(dash_duo: Any, css: str) -> Any:
    dash_duo.wait_for_element(f"{css} .main-svg", timeout=30)
    return dash_duo.driver.execute_script(
        "const g = document.querySelector(arguments[0]); return {data: g.data, layout: g.layout};", css)


@pytest.mark.browser
def test_3d_view_marks_the_culprit_and_a_selected_ranks_groups(dash_duo: Any, client: Any) -> None:
    dash_duo.start_server(create_app(client, DashboardSettings(refresh_s=3600)))
    css = "#parallel-panel .js-plotly-plot"
    dash_duo.driver.get(f"{dash_duo.server_url}/parallel?job={JOB}&range=all")
    fig = graph(dash_duo, css)
    shapes = {s.get("name") for s in fig["layout"]["shapes"]}
    assert f"culprit-{CULPRIT}" in shapes and {f"dim-{r}" for r in range(8) if r != CULPRIT} <= shapes
    assert any("✖ culprit" in t for row in fig["data"][0]["text"] for t in row)
    dash_duo.wait_for_contains_text("#parallel-incident", "h0002 rank 5", timeout=30)
    first_row = dash_duo.find_element("#rank-states tbody tr").text
    assert first_row.startswith("r5 h0002") and "culprit" in first_row and "time.sleep" in first_row

    dash_duo.driver.get(f"{dash_duo.server_url}/parallel?job={JOB}&range=all&rank=1")
    dash_duo.wait_for_contains_text("#rank-panel", "rank 1 on h0000", timeout=30)
    panel = dash_duo.find_element("#rank-panel").text
    assert "tensor-parallel group: r0, r1" in panel and "pipeline-parallel group: r1, r5" in panel
    assert "data-parallel group: r1, r3" in panel
    shapes = {s.get("name") for s in graph(dash_duo, css)["layout"]["shapes"]}
    assert {"selected-1", "group-tp-0", "group-pp-5", "group-dp-3"} <= shapes
    assert [e for e in (dash_duo.get_logs() or []) if e.get("level") == "SEVERE"] == []


@pytest.mark.browser
def test_alerts_page_groups_alerts_under_their_incident(dash_duo: Any, client: Any) -> None:
    dash_duo.start_server(create_app(client, DashboardSettings(refresh_s=3600)))
    dash_duo.driver.get(f"{dash_duo.server_url}/alerts?job={JOB}&range=all")
    dash_duo.wait_for_element("#incident-0", timeout=30)
    card = dash_duo.find_element("#incident-0").text
    assert "collective_hang" in card and "h0002 rank 5" in card and "time.sleep" in card
    assert "h0002/rank5" in card and "h0000/rank0" in card and "warning (was critical)" in card
    others = dash_duo.find_element("#alerts-table").text
    assert "h0003/forward" in others and "h0000/rank0" not in others
