"""Real 4-rank gloo DDP jobs that end badly, as 2 hosts (2 `vigil run` agents x 2 ranks), through the live analyzer.

Crash: rank 2 raises an NVLink error -> exactly one critical incident naming host-1 rank 2 with
its own message (a claim: a software crash, as no kernel line reported it), its peers' exits as victims,
no other critical page; replay agrees.
Hang: rank 3 sleeps before an all-reduce -> the step timer's watchdog dumps Flight Recorder
traces on every rank -> a `collective_hang` incident naming host-1 rank 3, long before the
peers' 30 s timeout; replay agrees.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent_harness import agent_env, read_events
from tests.support.waiting import wait_until
from vigil.analyzer.alerts.view import read_alert_events
from vigil.analyzer.clock import job_clocks
from vigil.analyzer.engine import replay
from vigil.analyzer.incidents.stage import IncidentStage
from vigil.analyzer.incidents.view import current, read_incident_events
from vigil.analyzer.service import AnalyzerService
from vigil.analyzer.settings import AnalyzerSettings
from vigil.clickhouse.client import connect
from vigil.contract import Alert, Incident, ProcessExit
from vigil.kafka.broker import free_port
from vigil.service import StackContext
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse, pytest.mark.slow, pytest.mark.timeout(240)]
TRAIN = Path(__file__).with_name("train_fault.py")
HOSTS = ("host-0", "host-1")


@pytest.fixture
def analyzer(topics: VigilSettings, clickhouse_dsn: str, database: str) -> Iterator[AnalyzerService]:
    ctx = StackContext(settings=topics, bootstrap=str(topics.kafka_bootstrap),
                       clickhouse=connect(clickhouse_dsn, database=database), clickhouse_dsn=clickhouse_dsn)
    service = AnalyzerService(ctx, AnalyzerSettings(group_id=f"g-{database}", batch_s=0.3, detect_interval_s=0.5))
    service.start()
    yield service
    service.stop()


def run_job(topics: VigilSettings, tmp_path: Path, job: str, **fault: str) -> list[subprocess.CompletedProcess[str]]:
    env = agent_env(topics, str(topics.kafka_bootstrap), tmp_path / "home", OMP_NUM_THREADS="1", **fault)
    port = str(free_port())
    procs = []
    for node, host in enumerate(HOSTS):
        argv = [sys.executable, "-m", "vigil", "run", "--host", host, "--job", job, "--no-echo", "--kill-grace", "10",
                "--", sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", port, str(TRAIN)]
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    done = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=150)
        finally:
            if p.poll() is None:
                p.kill()
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return done


def incidents(topics: VigilSettings, job: str) -> list[Incident]:
    return [i for i in current(read_incident_events(topics, str(topics.kafka_bootstrap), timeout=5)) if i.job_id == job]


def final_alerts(alerts: list[Alert], job: str) -> dict[str, Alert]:
    out: dict[str, Alert] = {}
    for a in sorted((a for a in alerts if a.job_id == job), key=lambda a: a.ts):
        out[a.fingerprint] = a
    return out


def shape(i: Incident) -> tuple[object, ...]:
    return (i.incident_id, i.category, i.cause, i.status, i.confidence,
            [(c.host, c.rank, c.message) for c in i.culprits], sorted((v.host, v.rank or -1) for v in i.victims))


def replayed(service: AnalyzerService, job: str) -> tuple[list[Alert], list[Incident]]:
    stage = IncidentStage(service.settings)
    alerts = replay(service.ctx.clickhouse, service.settings, job, stages=[stage])
    return alerts, current(stage.drain())


def settled(service: AnalyzerService, topics: VigilSettings, job: str, victims: int) -> list[Incident]:
    """Wait until the live analyzer published the job's incident with all its victims, then judged the job to its end.

    The job has ended: once its agents are silent the live clock runs to its last event, as a
    replay does. Until the cursor is there (a loaded machine may trail by many instants) the
    incident may still change (resolve when the job stops), so that is awaited, not slept on;
    the incident events of the last turn are published right after it.
    """
    def ready() -> bool:
        got = incidents(topics, job)
        return bool(got) and len(got[0].victims) >= victims
    wait_until(ready, 60, f"the live incident of {job} with {victims} victims")
    step = service.settings.eval_step_s

    def judged_to_the_end() -> bool:
        (clock,) = job_clocks(service.ctx.clickhouse, job=job)  # no frontier: as a replay sees it, stopped
        pos = service.cursor.positions.get(job)
        return pos is not None and pos >= clock.until(step) and not service.cursor.backlog
    wait_until(judged_to_the_end, 120, f"the live analyzer judging {job} to its end", every=0.5)
    _, final = replayed(service, job)
    wait_until(lambda: [shape(i) for i in incidents(topics, job)] == [shape(i) for i in final], 30,
               f"the live incidents of {job} equal to replay's {[shape(i) for i in final]}")
    return incidents(topics, job)


def test_a_crash_is_one_incident_naming_the_culprit_rank_and_host(
    topics: VigilSettings, analyzer: AnalyzerService, tmp_path: Path
) -> None:
    job = "crash"
    done = run_job(topics, tmp_path, job, FAULT="crash", FAULT_RANK="2")
    assert [d.returncode for d in done] == [1, 1], [d.stderr[-2000:] for d in done]
    assert "rank 2 (local rank 0) failed first: RuntimeError: CUDA error: uncorrectable NVLink" in done[1].stderr
    exits = [e for e in read_events(topics, str(topics.kafka_bootstrap), ["logs"]) if isinstance(e, ProcessExit)
             and e.job_id == job]
    ranks = {e.rank: e for e in exits if not e.launcher}
    assert set(ranks) == {0, 1, 2, 3} and len(exits) == 6  # one per rank process, one per torchrun
    assert ranks[2].summary == "RuntimeError: CUDA error: uncorrectable NVLink error detected during execution"
    assert all("NVLink" not in ranks[r].summary for r in (0, 1, 3))  # each peer's own error, never the culprit's

    (live,) = settled(analyzer, topics, job, victims=3)
    # the rank's own "NVLink error" is a claim (no kernel line reported it): a software crash, the claim evidence
    assert (live.category, live.cause, live.severity, live.status) == ("crash_cascade", "software", "critical", "open")
    assert live.evidence["claims_hardware"] is True
    (culprit,) = live.culprits
    assert (culprit.host, culprit.rank, culprit.local_rank) == ("host-1", 2, 0)
    assert culprit.message == "RuntimeError: CUDA error: uncorrectable NVLink error detected during execution"
    assert sorted((v.host, v.rank) for v in live.victims) == [("host-0", 0), ("host-0", 1), ("host-1", 3)]
    alerts = read_alert_events(topics, str(topics.kafka_bootstrap))
    now = final_alerts(alerts, job)
    assert {a.evidence.get("incident_id") for a in now.values()} == {live.incident_id}
    assert not [a for a in alerts if a.job_id == job and a.severity == "critical"
                and a.evidence.get("incident_role") != "culprit"], "a critical page besides the culprit's"
    assert set(live.alerts) == set(now)

    re_alerts, re_incidents = replayed(analyzer, job)
    assert [shape(i) for i in re_incidents] == [shape(live)]
    assert {fp: (a.severity, a.evidence.get("incident_id")) for fp, a in final_alerts(re_alerts, job).items()} == \
        {fp: (a.severity, a.evidence.get("incident_id")) for fp, a in now.items()}


def test_a_hang_names_the_rank_that_never_joined_the_all_reduce(
    topics: VigilSettings, analyzer: AnalyzerService, tmp_path: Path
) -> None:
    job = "hang"
    done = run_job(topics, tmp_path, job, FAULT="hang", FAULT_RANK="3")
    assert [d.returncode for d in done] == [1, 1], [d.stderr[-2000:] for d in done]
    exits = [e for e in read_events(topics, str(topics.kafka_bootstrap), ["logs"]) if isinstance(e, ProcessExit)
             and e.job_id == job and not e.launcher]
    timed_out = [e.failed_at for e in exits if "Timed out waiting 30000ms" in e.summary and e.failed_at]
    assert timed_out, [(e.rank, e.summary) for e in exits]

    (live,) = settled(analyzer, topics, job, victims=3)
    assert (live.category, live.severity, live.confidence) == ("collective_hang", "critical", "strong")
    (culprit,) = live.culprits
    assert (culprit.host, culprit.rank) == ("host-1", 3)
    assert "not in gloo:all_reduce" in culprit.message and "time.sleep" in culprit.message
    assert sorted((v.host, v.rank) for v in live.victims) == [("host-0", 0), ("host-0", 1), ("host-1", 2)]
    assert live.detected <= min(timed_out)  # named from the dumps, before its peers even timed out
    hang = [a for a in read_alert_events(topics, str(topics.kafka_bootstrap))
            if a.job_id == job and a.alert == "collective_hang"]
    assert hang and hang[0].subject == "host-1/rank3" and hang[0].severity == "critical"

    re_alerts, re_incidents = replayed(analyzer, job)
    assert [shape(i) for i in re_incidents] == [shape(live)]
    now = final_alerts(read_alert_events(topics, str(topics.kafka_bootstrap)), job)
    assert {fp: (a.severity, a.evidence.get("incident_id")) for fp, a in final_alerts(re_alerts, job).items()} == \
        {fp: (a.severity, a.evidence.get("incident_id")) for fp, a in now.items()}
