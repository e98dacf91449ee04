"""A real 3-host torch job loses a host for good: the live analyzer pages it, the job resumes on two and finishes.

Three `vigil run --nodes 2:3` agents run tests/chaos/chaos_worker.py (gloo, CPU, a checkpoint every
5 steps); the analyzer runs as a `vigil analyzer` process on its own store, the controller as
`vigil recovery run`, on the session's broker. Once the job trains on 3 hosts the harness SIGKILLs
host h2 (its agent and its training) and never starts it again: a host lost, as a machine that
powers off is. Asserted: the live analyzer publishes a firing `heartbeat_loss` alert naming h2 and
no other host (its heartbeats stop while h0's and h1's go on); the controller resumes the job on
h0 and h1; the job, told to end, finishes (both agents exit 0, the controller records `finish`);
and replaying the stored telemetry over the instants the live analyzer judged (its saved position)
raises the same alert events, instant for instant.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.chaos.services import Service
from tests.recovery.live import PY, Live
from tests.waiting import wait_until
from vigil.app.demo.run import kill_tree
from vigil.contract import Alert
from vigil.recovery.controller.state import ClusterState

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]
WORKER = Path(__file__).parents[1] / "chaos" / "chaos_worker.py"
JOB, HOSTS, LOST = "job-lost", ("h0", "h1", "h2"), "h2"

REPLAY = """
import json, sys
from vigil.analyzer.detect.base import as_utc
from vigil.analyzer.engine import replay
from vigil.analyzer.incidents.stage import IncidentStage
from vigil.analyzer.settings import AnalyzerSettings
from vigil.clickhouse.client import connect
client, job = connect(sys.argv[1]), sys.argv[2]
rows = client.query("SELECT position FROM detect_positions FINAL WHERE job_id = {j:String}", parameters={"j": job})
until = as_utc(rows.result_rows[0][0])  # the driver's datetimes are naive UTC
settings = AnalyzerSettings()
alerts = replay(client, settings, job, end=until, stages=[IncidentStage(settings)])
print(json.dumps({"until": until.isoformat(), "alerts": [[a.ts.isoformat(), a.fingerprint, a.status, a.severity]
                                                         for a in alerts]}))
"""


def resumed_on_two(s: ClusterState) -> bool:
    """A later generation trains on h0 and h1 only, no recovery open."""
    j = s.jobs.get(JOB)
    return (j is not None and j.generation >= 2 and set(j.world) == {"h0", "h1"}
            and not any(c.job_id == JOB and c.open for c in s.cases.values())
            and all((m := j.members.get(h)) is not None and m.state == "training" for h in j.world))


def lost_pages(live: Live) -> list[Alert]:
    return [e for e in live.events if isinstance(e, Alert) and e.job_id == JOB and e.alert == "heartbeat_loss"]


def test_a_real_job_that_loses_a_host_for_good_is_paged_naming_it_and_finishes_on_the_two_left(live: Live) -> None:
    tmp = live.tmp
    dsn = f"chdb://{tmp / 'analyzer-ch'}"
    analyzer = Service(name="analyzer", argv=["analyzer"], log=tmp / "analyzer.log", running="analyzer running",
                       env={**live.env, "VIGIL_CLICKHOUSE_DSN": dsn, "VIGIL_ANALYZER_BATCH_S": "0.3"})
    stop = tmp / "stop"
    command = [PY, "-m", "torch.distributed.run", "--nproc-per-node", "1", str(WORKER), "--ckpt", str(tmp / "ckpt"),
               "--stop", str(stop)]
    try:
        analyzer.start()
        wait_until(analyzer.ready, 300, "the analyzer to run")
        for h in HOSTS:
            live.start_agent(h, command, nodes="2:3", job=JOB)
        live.start_controller()
        live.wait_for(lambda s: (j := s.jobs.get(JOB)) is not None and len(j.world) == 3
                      and all(m.state == "training" for m in j.members.values()), 240, "the job to train on 3 hosts")

        killed = datetime.now(UTC)
        kill_tree(live.agents.pop(LOST))  # the host is gone: its agent, its training, and nothing comes back
        live.wait_for(lambda _s: any(a.status == "firing" for a in lost_pages(live)), 180,
                      f"the analyzer to page {LOST}'s heartbeat loss")
        live.wait_for(resumed_on_two, 300, "the job to train again on h0 and h1")
        stop.touch()
        wait_until(lambda: all(p.poll() is not None for p in live.agents.values()), 180, "both agents to exit")
        assert {h: p.returncode for h, p in live.agents.items()} == {"h0": 0, "h1": 0}
        live.wait_for(lambda s: s.job(JOB).finished is not None, 60, "the controller to record the job finished")

        pages = lost_pages(live)
        assert {a.host for a in pages} == {LOST}, [(a.host, a.subject, a.status) for a in pages]
        assert analyzer.stop() == 0  # its position saved: the last instant it judged
        done = subprocess.run([PY, "-c", REPLAY, dsn, JOB], env=analyzer.env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        replayed = json.loads(done.stdout.strip().splitlines()[-1])
        until = datetime.fromisoformat(replayed["until"])
        live.fold()
        judged = sorted([a.ts.isoformat(), a.fingerprint, a.status, a.severity] for a in live.events
                        if isinstance(a, Alert) and a.job_id == JOB and a.ts <= until)
        assert any(f[1:3] == [pages[0].fingerprint, "firing"] for f in judged)
        assert judged == sorted(replayed["alerts"]), "live and replay differ over the instants live judged"
        print(*judged, sep="\n")
        print(f"\nlost host: {len(pages)} heartbeat_loss events for {LOST}, first at "
              f"{min(a.ts for a in pages):%H:%M:%S} (killed {killed:%H:%M:%S}); {len(judged)} alert events of the job, live == replay to {until}")
    finally:
        analyzer.stop()
