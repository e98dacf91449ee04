"""A real 3-host torch job loses a host for good: the live analyzer pages it, the job resumes on two and finishes.

Three `vigil run --nodes 2:3` agents run tests/chaos/chaos_worker.py (gloo, CPU, a checkpoint every
5 steps); the analyzer runs as a `vigil analyzer` process on its own store, the controller as
`vigil recovery run`, on the session's broker. Once the job trains on 3 hosts the harness SIGKILLs
host h2 (its agent and its training) and never starts it again: a host lost, as a machine that
powers off is. Asserted: the live analyzer publishes a firing `heartbeat_loss` alert naming h2 and
no other host (its heartbeats stop while h0's and h1's go on); the controller resumes the job on
h0 and h1; the job, told to end, finishes (both agents exit 0, the controller records `finish`);
and replaying the stored telemetry over the instants the live analyzer judged (its saved position)
raises the same alert events, instant for instant, as the alerts topic holds.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime

import pytest

from tests.support.live import PY, Live
from tests.support.services import analyzer_service, chaos_job
from tests.support.waiting import wait_until
from vigil.analyzer.alerts.view import read_alert_events
from vigil.app.demo.run import kill_tree
from vigil.contract import Alert
from vigil.recovery.controller.state import ClusterState

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]
JOB, HOSTS, LOST = "job-lost", ("h0", "h1", "h2"), "h2"

REPLAY = """
import json, sys
from vigil.analyzer.engine import replay
from vigil.analyzer.incidents.stage import IncidentStage
from vigil.analyzer.positions import ClickHousePositions
from vigil.analyzer.settings import AnalyzerSettings
from vigil.clickhouse.client import connect
client, job = connect(sys.argv[1]), sys.argv[2]
until = ClickHousePositions(client=client).load()[job]  # where the live analyzer stopped judging the job
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
    analyzer, dsn = analyzer_service(live.env, tmp)
    command, stop = chaos_job(live.writable("job"), python=live.python)  # the job's folder: its own
    try:
        analyzer.start()
        wait_until(analyzer.ready, 300, "the analyzer to run")
        live.start_job(JOB, HOSTS, command, nodes="2:3")

        killed = datetime.now(UTC)
        kill_tree(live.agents.pop(LOST))  # the host is gone: its agent, its training, and nothing comes back
        # paged while h2 is still a member of the running generation: the detector wants 3 of its 5 s heartbeat
        # intervals of silence, the controller drops a silent member after VIGIL_RECOVERY_MEMBER_STALE_S (30 s here,
        # live.FAST) and the ranks left time out in gloo before the restart; the restarted run's members exclude h2
        # (heartbeat.py), so a stale time under ~15 s would leave no page to wait for
        live.wait_for(lambda _s: any(a.status == "firing" for a in lost_pages(live)), 180,
                      f"the analyzer to page {LOST}'s heartbeat loss")
        live.wait_for(resumed_on_two, 300, "the job to train again on h0 and h1")
        stop.touch()
        wait_until(lambda: all(p.poll() is not None for p in live.agents.values()), 180, "both agents to exit")
        assert {h: p.returncode for h, p in live.agents.items()} == {"h0": 0, "h1": 0}
        live.wait_for(lambda s: s.job(JOB).finished is not None, 60, "the controller to record the job finished")

        assert analyzer.stop() == 0  # its position saved: every instant up to it has its alerts on the topic
        done = subprocess.run([PY, "-c", REPLAY, dsn, JOB], env=analyzer.env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        replayed = json.loads(done.stdout.strip().splitlines()[-1])
        until = datetime.fromisoformat(replayed["until"])
        published = [a for a in read_alert_events(live.settings, live.bootstrap) if a.job_id == JOB]  # all of them
        lost = [a for a in published if a.alert == "heartbeat_loss"]
        assert lost and {a.host for a in lost} == {LOST}, [(a.host, a.subject, a.status) for a in lost]
        judged = sorted([a.ts.isoformat(), a.fingerprint, a.status, a.severity] for a in published if a.ts <= until)
        assert [lost[0].fingerprint, "firing"] in [f[1:3] for f in judged]  # the page is among the instants compared
        expected = sorted(replayed["alerts"])
        assert judged == expected, ("live and replay differ over the instants live judged", until,
                                    [f for f in judged if f not in expected], [f for f in expected if f not in judged])
        print(f"\nlost host: {LOST} paged at {min(a.ts for a in lost):%H:%M:%S} (killed {killed:%H:%M:%S}); "
              f"{len(judged)} alert events of the job, live == replay to {until:%H:%M:%S}")
    finally:
        analyzer.stop()
