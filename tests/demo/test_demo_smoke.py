"""`vigil demo` (what `make demo` runs) as a real subprocess: the dashboard answers, the real
torch job's steps reach ClickHouse and the dashboard's pages (its step chart, its hosts on the
heatmap, its latest committed checkpoint, fetched over HTTP as the browser gets them), the
recovery controller cordons the host whose rank died of an Xid and the job trains on on the other
two, a webhook named by VIGIL_NOTIFY_WEBHOOK_URL receives the demo's alerts signed, and Ctrl-C
leaves no process behind. The Xid is one `host_fault` incident naming its rank; after the restart the
slowed rank hangs once: one `collective_hang` incident names it (from the ranks' Flight Recorder
traces); both on the alerts page. After its recovery one rank flips one bit of one weight once: one
`silent_data_corruption` incident names its replica, and the controller's rollback and replay judge it transient."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support.dashhttp import figure_of, find, render_page, texts
from tests.support.receiver import Receiver, signed_by
from vigil.app.demo.run import DIGEST_EVERY, FLIP_AT

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse, pytest.mark.slow, pytest.mark.timeout(900)]
TORCH_HOSTS = {"demo-host-0", "demo-host-1", "demo-host-2"}
XID_HOST = "demo-host-0"
BAD = (FLIP_AT // DIGEST_EVERY + 1) * DIGEST_EVERY  # the first digest step after the flip


def _sql(control_url: str, sql: str, home: Path) -> list[list[object]]:
    token = json.loads(next(home.rglob("stack.json")).read_text())["token"]  # the control port wants vigil up's token
    resp = httpx.post(f"{control_url}/sql", json={"sql": sql}, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    resp.raise_for_status()
    rows: list[list[object]] = resp.json()["rows"]
    return rows


def _awaited(control_url: str, sql: str, home: Path, timeout_s: float) -> list[list[object]]:
    """The rows of `sql` once there are any (polled every 2 s), or none after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    rows: list[list[object]] = []
    while time.monotonic() < deadline and not rows:
        rows = _sql(control_url, sql, home)
        if not rows:
            time.sleep(2)
    return rows


def test_demo_runs_shows_torch_steps_and_stops_clean(tmp_path: Path) -> None:
    oncall = Receiver()
    oncall.up()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIGIL_")}
    env.update(VIGIL_HOME=str(tmp_path), PYTHONUNBUFFERED="1", VIGIL_DASHBOARD_PORT="0",
               VIGIL_NOTIFY_WEBHOOK_URL=oncall.url, VIGIL_NOTIFY_WEBHOOK_SECRET="demo-secret",
               VIGIL_NOTIFY_GROUP_WAIT_S="5")
    proc = subprocess.Popen(
        [sys.executable, "-m", "vigil", "demo", "--sim-hosts", "32", "--duration", "840"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    out: list[str] = []
    try:
        deadline = time.monotonic() + 180
        control = dashboard = None
        assert proc.stdout is not None
        while time.monotonic() < deadline and not (control and dashboard):
            line = proc.stdout.readline()
            if not line:
                break
            out.append(line)
            if m := re.search(r"control (http://\S+)", line):
                control = m.group(1)
            if m := re.search(r"Open (http://\S+)", line):
                dashboard = m.group(1)
        assert control and dashboard, "".join(out)
        # keep reading the demo's output, so a full pipe never blocks it while the test polls
        stream = proc.stdout
        threading.Thread(target=lambda: out.extend(iter(stream.readline, "")), daemon=True).start()
        assert httpx.get(dashboard, timeout=30).status_code == 200

        ranks: set[object] = set()
        while time.monotonic() < deadline and len(ranks) < 6:
            rows = _sql(control, "SELECT DISTINCT rank FROM step_timings WHERE job_id = 'demo-torch'", tmp_path)
            ranks = {r[0] for r in rows}
            time.sleep(2)
        assert ranks == {0, 1, 2, 3, 4, 5}, f"torch ranks seen: {ranks}\n" + "".join(out)
        hosts = {r[0] for r in _sql(control, "SELECT DISTINCT host FROM step_timings WHERE job_id = 'demo-torch'", tmp_path)}
        assert hosts == TORCH_HOSTS

        # the same steps on the dashboard: the torch job's step chart, its hosts as heatmap rows
        page_deadline = time.monotonic() + 120
        step_points: list[object] = []
        heat_rows: set[object] = set()
        overview: object = None
        while time.monotonic() < page_deadline and not (step_points and heat_rows == TORCH_HOSTS):
            overview = render_page(dashboard, "/overview", "?job=demo-torch&range=all")
            chart = figure_of(overview, "step-graph")["data"]
            step_points = list(chart[0]["x"]) if chart else []
            heat = figure_of(render_page(dashboard, "/heatmap", "?job=demo-torch&range=all"),
                             {"type": "host-click", "page": "heatmap"})["data"]
            heat_rows = set(heat[0]["y"]) if heat else set()
            time.sleep(2)
        assert step_points, f"no steps on the overview of demo-torch: {overview}"
        assert heat_rows == TORCH_HOSTS
        assert "demo-torch" in texts(overview)  # the jobs table lists it
        # the torch job checkpoints (two-phase, every 20 steps): committed, and on its overview
        committed: list[list[object]] = []
        while time.monotonic() < page_deadline and not committed:
            committed = _sql(control, "SELECT step FROM checkpoints WHERE job_id = 'demo-torch' AND phase = 'committed'", tmp_path)
            time.sleep(2)
        assert committed, "no committed checkpoint of demo-torch\n" + "".join(out)
        # the overview's checkpoint panel: its own query, so it may answer a turn later (or fail a turn under load,
        # shown as a store error in the panel): awaited, and the panel's text is the failure message
        panel: list[str] = []
        while time.monotonic() < page_deadline + 60:
            panel = texts(find(render_page(dashboard, "/overview", "?job=demo-torch&range=all"), "checkpoint-panel"))
            if any(t.startswith("step ") and t[5:].isdigit() and int(t[5:]) % 20 == 0 for t in panel):
                break
            time.sleep(2)
        assert any(t.startswith("step ") and t[5:].isdigit() and int(t[5:]) % 20 == 0 for t in panel), panel
        # the Xid of demo-host-0 (rank 0): cordoned by the recovery controller, the job trains on on the other two
        recovery_deadline = time.monotonic() + 360  # a scale-up (an agent announced late) and the exit's restart can come first
        restarted: list[list[object]] = []
        while time.monotonic() < recovery_deadline and not restarted:
            # the Xid's recovery: the one that cordoned the host (an agent that announced late makes the job start
            # on 2 hosts and scale up to 3 first: that restart is not the one looked for)
            restarted = _sql(control, "SELECT ts FROM recovery_actions WHERE job_id = 'demo-torch' "
                             "AND action = 'restart' AND status = 'succeeded' AND incident_id IN (SELECT incident_id "
                             "FROM recovery_actions WHERE job_id = 'demo-torch' AND action = 'cordon' AND status = "
                             f"'succeeded' AND target = '{XID_HOST}') ORDER BY ts DESC LIMIT 1", tmp_path)
            time.sleep(2)
        assert restarted, "no automatic recovery of demo-torch\n" + "".join(out)
        cordons: list[list[object]] = []
        while time.monotonic() < recovery_deadline and not cordons:  # its rows may be ingested after the restart's
            cordons = _sql(control, "SELECT target FROM recovery_actions WHERE job_id = 'demo-torch' AND "
                           "action = 'cordon' AND status = 'succeeded' AND target != 'demo-torch'", tmp_path)
            time.sleep(1)
        assert cordons == [[XID_HOST]], "".join(out)
        # the terminal tells where the Xid came from and what the catalog says of it: the host's kernel log (the
        # demo's fake kmsg, which the agent follows), not the rank's own output
        kernel_xid = re.compile(rf"^Hardware  {XID_HOST}(?: GPU \d+)?: Xid 79 \[source kernel, catalog action "
                                r"reboot_then_check\] ", re.MULTILINE)
        while time.monotonic() < recovery_deadline and not kernel_xid.search("".join(out)):  # the terminal lags
            time.sleep(1)
        assert kernel_xid.search("".join(out)), "".join(out)
        resumed = ("Recovery  resumed on demo-host-1, demo-host-2 at step",  # world order: who joined first
                   "Recovery  resumed on demo-host-2, demo-host-1 at step")
        while time.monotonic() < recovery_deadline and not any(r in "".join(out) for r in resumed):  # terminal lags
            time.sleep(1)
        assert any(r in "".join(out) for r in resumed), "".join(out)
        # the resumed job's rank 0 reports its data re-split in its job event; the terminal tells it
        resplit_deadline = time.monotonic() + 60
        while time.monotonic() < resplit_deadline and "re-split over 4 ranks" not in "".join(out):
            time.sleep(1)
        resplit = [line for line in "".join(out).splitlines() if "re-split over 4 ranks" in line]
        assert resplit and resplit[0].startswith("Recovery    data: "), "".join(out)
        assert resplit[0].endswith(": none lost or repeated"), resplit
        # from the freshest state, not the older persisted checkpoint: the job started on demo-host-0, 1, 2 (in that
        # order), so the ranks renumber on the two left and take the lost host's ranks' state (rank 0's, 1's) from
        # the copies its buddy demo-host-1 held, and demo-host-2 ranks 2, 3 from those it held for demo-host-1.
        # Only when an agent announced late (the job started on 2 hosts, demo-host-0 joined last) does every rank
        # keep its number and restore its own in-memory snapshot.
        started_in_order = "Recovery  demo-torch started on demo-host-0, demo-host-1, demo-host-2 (generation 1)"
        source = "a peer host's copy of the snapshot" if started_in_order in "".join(out) else (
            "(the in-memory snapshot|a peer host's copy of the snapshot)")
        assert re.search(rf"Recovery  resumed on demo-host-[12], demo-host-[12] at step \d+ from {source} of step "
                         r"\d+ \([01] steps? lost\)", "".join(out)), "".join(out)
        after = _sql(control, "SELECT DISTINCT host FROM step_timings WHERE job_id = 'demo-torch' AND ts > "
                     f"toDateTime64('{restarted[0][0]}', 3, 'UTC')", tmp_path)
        assert {r[0] for r in after} <= TORCH_HOSTS - {XID_HOST}
        # the Recovery page tells it: the cordon, and the recovery that resumed the job (its outcome)
        assert "/recovery?job=demo-torch" in "".join(out)
        story = cordoned_now = ""
        while time.monotonic() < recovery_deadline:
            page = render_page(dashboard, "/recovery", "?job=demo-torch")
            story = " ".join(texts(find(page, "recoveries") or {}))
            cordoned_now = " ".join(texts(find(page, "rec-cordons") or {}))
            if "resumed" in story and f"cordoned {XID_HOST}" in story and XID_HOST in cordoned_now:
                break
            time.sleep(2)
        assert "resumed" in story and f"cordoned {XID_HOST}" in story and XID_HOST in cordoned_now, story
        notify_deadline = time.monotonic() + 180  # the simulated straggler fires ~1-2 min into the demo
        while time.monotonic() < notify_deadline and not oncall.delivered():
            time.sleep(2)
        pages = [r.json() for r in oncall.delivered()]
        assert pages and {p["job_id"] for p in pages} <= {"demo-torch", "demo-sim"}, "".join(out)
        assert all(signed_by(b"demo-secret", r) for r in oncall.all())
        assert "Notify    alerts and incidents go to webhook (webhook http://127.0.0.1" in "".join(out)
        descendants = psutil.Process(proc.pid).children(recursive=True)
        assert len(descendants) >= 6  # broker, 3 agents, 2 torchrun, 4 ranks, simulator

        # the Xid is one incident naming its culprit: the analyzer's verdict, which holds a crash's hardware lines
        # ~20 s; the controller acted on the agent's attested Xid before it, so it is awaited
        xid = _awaited(control, "SELECT category, culprit_host, culprit_rank FROM incidents_current WHERE job_id = "
                                "'demo-torch' AND category = 'host_fault' ORDER BY first_sign", tmp_path, 120)
        assert xid[:1] == [["host_fault", XID_HOST, 0]], "".join(out[-50:])
        assert {row[1] for row in xid} == {XID_HOST}, xid  # no other host blamed
        # after the restart on 2 hosts, the slowed rank (demo-host-1's local rank 1: global rank 1 now) hangs once at
        # step 155: one incident names it (Flight Recorder, the checkpointer's collectives in every dump), on the alerts page
        incident = _awaited(control, "SELECT category, culprit_host, culprit_rank FROM incidents_current "
                                     "WHERE job_id = 'demo-torch' AND category = 'collective_hang'", tmp_path, 300)
        assert incident == [["collective_hang", "demo-host-1", 1]], "".join(out[-50:])
        alerts_page = " ".join(texts(render_page(dashboard, "/alerts", "?job=demo-torch&range=all")))
        assert "collective_hang" in alerts_page and "demo-host-1" in alerts_page
        assert "host_fault" in alerts_page and XID_HOST in alerts_page
        # after the hang's recovery, one bit of one weight flipped once by demo-host-2's local rank 0 after step FLIP_AT
        # (2 hosts, 4 replicas): one silent_data_corruption incident names that replica at the next digest step; the
        # controller rolls the job back to at most the last agreed step, replays, and its signed verdict says
        # transient (the flip does not repeat)
        sdc = _awaited(control, "SELECT culprit_host, toInt64(JSONExtractInt(evidence, 'step')) FROM incidents_current "
                                "WHERE job_id = 'demo-torch' AND category = 'silent_data_corruption'", tmp_path, 300)
        assert [row[0] for row in sdc] == ["demo-host-2"] and int(str(sdc[0][1])) == BAD, sdc
        verdict = _awaited(control, "SELECT target, JSONExtractString(details, 'replay', 'verdict'), toInt64(JSONExtractInt("
                                    "details, 'replay', 'snapshot_step')), toInt64(JSONExtractInt(details, 'replay', "
                                    "'steps_recomputed')) FROM recovery_actions WHERE job_id = 'demo-torch' AND action = "
                                    "'diagnose' AND status = 'succeeded' AND JSONHas(details, 'replay')", tmp_path, 300)
        assert [row[:2] for row in verdict] == [["demo-host-2", "transient"]], verdict
        assert int(str(verdict[0][2])) <= BAD - DIGEST_EVERY and int(str(verdict[0][3])) == BAD - int(str(verdict[0][2])), verdict
        assert "-> plan: pause -> restart -> replay" in "".join(out) and "replay verdict transient" in "".join(out)
    finally:
        oncall.down()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(120)  # the demo gives its agents 30 s, then stops the stack
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    left = [p for p in descendants if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert left == [], f"left running: {[p.cmdline() for p in left]}"
    assert proc.returncode == 0
