"""Hangs and crashes through real ClickHouse: stored telemetry -> detectors -> incident stage -> alerts.

Four ranks on two hosts (h0000: ranks 0, 1; h0001: ranks 2, 3) step every second; then
either rank 3 hangs (the real `hang_ddp` Flight Recorder dumps, 3 s into the stall; the
victims time out 30 s later) or rank 2 crashes with an NVLink error.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.support.crafted import T0, heartbeats, steps
from vigil.analyzer.engine import replay
from vigil.analyzer.incidents.stage import IncidentStage
from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.analyzer.settings import AnalyzerSettings
from vigil.clickhouse.client import connect
from vigil.collector.flightrec import parse_dump, to_trace
from vigil.contract import (
    Alert,
    Event,
    Incident,
    JobRegistered,
    LogLine,
    ParallelCoords,
    ProcessExit,
    RankPlacement,
)
from vigil.contract.xid import XidAction

pytestmark = pytest.mark.clickhouse
FR = Path(__file__).parents[1] / "fixtures" / "flightrec" / "hang_ddp"
TIMEOUT = "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 30000ms for recv operation"
CLOSED = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:29603."
NVLINK = "RuntimeError: CUDA error: uncorrectable NVLink error detected during execution"


def t(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def host(rank: int) -> str:
    return f"h{rank // 2:04d}"


def gone(job: str, rank: int, s: float, message: str, failed: float | None, signal: str | None = None) -> ProcessExit:
    return ProcessExit(job_id=job, host=host(rank), ts=t(s), rank=rank, local_rank=rank % 2, pid=100 + rank,
                       exit_code=None if signal else 1, signal=signal, summary=message,
                       failed_at=t(failed) if failed is not None else None)


def run(dsn: str, db: str, job: str, events: list[Event]) -> tuple[list[Alert], list[Incident]]:
    ClickHouseWriter(client=connect(dsn, database=db)).write(events)
    settings = AnalyzerSettings()
    stage = IncidentStage(settings)
    alerts = replay(connect(dsn, database=db), settings, job, stages=[stage])
    return alerts, stage.drain()


def latest(alerts: list[Alert]) -> dict[str, Alert]:
    out: dict[str, Alert] = {}
    for a in alerts:
        out[a.fingerprint] = a
    return out


def test_a_hang_names_the_rank_that_never_joined_and_its_victims(clickhouse_dsn: str, database: str) -> None:
    job = "hung"
    traces = []
    for rank in range(4):
        doc = parse_dump((FR / f"fr_{rank}").read_bytes())
        trace = to_trace(doc, job_id=job, host=host(rank), rank=rank, dumped_at=t(18))
        traces.append(trace.model_copy(update={"ts": t(18.5), "group_ranks": {"0": [0, 1, 2, 3]}, "step": 14}))
    exits = [gone(job, r, 46, TIMEOUT, 45) for r in range(3)] + [gone(job, 3, 47, "", None, "SIGTERM")]
    lines = [LogLine(job_id=job, host=host(r), ts=t(45), rank=r, category="collective_timeout", severity="error",
                     message=TIMEOUT) for r in range(3)]
    alerts, incidents = run(clickhouse_dsn, database, job, [*steps(job, 2, 15), *heartbeats(job, 2, 50), *traces,
                                                            *exits, *lines])
    assert {i.incident_id for i in incidents} == {f"{job}/collective_hang/h0001/r3/20261101T120015"}
    final = incidents[-1]
    assert (final.category, final.status, final.severity, final.confidence) == ("collective_hang", "open", "critical",
                                                                                "strong")
    (culprit,) = final.culprits
    assert (culprit.host, culprit.rank, culprit.local_rank) == ("h0001", 3, 1)
    assert culprit.coords is not None and (culprit.coords.dp, culprit.coords.tp) == (1, 1)
    assert "not in gloo:all_reduce [[68]] (group 0 default_pg seq 21)" in culprit.message
    assert sorted(v.rank for v in final.victims) == [0, 1, 2]
    assert final.first_sign == t(15)  # the job's last step before the dumps
    hang = [a for a in alerts if a.alert == "collective_hang"]
    assert hang and hang[0].ts < t(46)  # named from the dumps, before anyone timed out
    now = latest(alerts)
    for fp, a in now.items():
        assert a.evidence.get("incident_id") == final.incident_id, fp
    critical = {fp for fp, a in now.items() if a.severity == "critical"}
    assert critical == {f"{job}/collective_hang/h0001/rank3", f"{job}/process_exit/h0001/rank3"}
    assert all(now[f"{job}/process_exit/{host(r)}/rank{r}"].evidence["severity_before"] == "critical" for r in range(3))
    assert set(final.alerts) == set(now)


def registered(job: str, hosts: int, s: float) -> JobRegistered:
    ranks = [RankPlacement(rank=r, host=host(r), local_rank=r % 2, coords=ParallelCoords(dp=r)) for r in range(2 * hosts)]
    return JobRegistered(job_id=job, host="h0000", ts=t(s), world_size=2 * hosts, dp=2 * hosts, ranks=ranks)


def hang_dumps(job: str, ranks: range, s: float, world: int) -> list[Event]:
    out: list[Event] = []
    for rank in ranks:
        trace = to_trace(parse_dump((FR / f"fr_{rank % 4}").read_bytes()), job_id=job, host=host(rank), rank=rank,
                         dumped_at=t(s))
        out.append(trace.model_copy(update={"ts": t(s + 0.5), "group_ranks": {"0": list(range(world))}, "step": 14}))
    return out


def test_a_hang_after_a_restart_on_fewer_hosts_is_judged_on_the_new_run_alone(clickhouse_dsn: str,
                                                                              database: str) -> None:
    """6 ranks on 3 hosts; h0002's ranks dumped when the first run failed; the job restarts from step 10 on
    2 hosts (4 ranks, registered again) and rank 3 hangs: the old run's ranks and dumps play no part."""
    job = "rehung"
    first = [*steps(job, 3, 20), registered(job, 3, 0), *hang_dumps(job, range(4, 6), 22, 6)]
    again = [registered(job, 2, 40), *steps(job, 2, 15, first_step=10, start=t(40)), *hang_dumps(job, range(4), 58, 4)]
    alerts, incidents = run(clickhouse_dsn, database, job, [*first, *again, *heartbeats(job, 2, 100)])
    final = incidents[-1]
    assert {i.incident_id for i in incidents} == {final.incident_id} and final.category == "collective_hang"
    assert [(c.host, c.rank) for c in final.culprits] == [("h0001", 3)]
    assert sorted(v.rank for v in final.victims) == [0, 1, 2]
    hang = next(a for a in alerts if a.alert == "collective_hang")
    assert hang.evidence["expected"] == 4 and hang.evidence["dumps"] == 4
    assert hang.ts < t(58 + AnalyzerSettings().hang.gather_s)  # every member of the new run dumped: judged at once


def test_a_crash_names_its_first_own_error_and_pages_once(clickhouse_dsn: str, database: str) -> None:
    job = "crashed"
    exits = [gone(job, 2, 12.3, NVLINK, 10.0), gone(job, 3, 12.2, CLOSED, 11.3, "SIGTERM"),
             gone(job, 1, 14.0, CLOSED, 11.3), gone(job, 0, 14.1, CLOSED, 13.0, "SIGTERM")]
    lines = [LogLine(job_id=job, host="h0001", ts=t(10), rank=2, category="xid", severity="critical", xid=74,
                     source="kernel", action=XidAction.CORDON, gpu_index=0,
                     message="NVRM: Xid (PCI:0000:3b:00): 74, pid=4242, name=python, NVLink: fatal error")]
    alerts, incidents = run(clickhouse_dsn, database, job, [*steps(job, 2, 10), *heartbeats(job, 2, 30), *exits,
                                                            *lines])
    assert len({i.incident_id for i in incidents}) == 1
    final = incidents[-1]
    assert (final.category, final.cause, final.severity) == ("host_fault", "hardware", "critical")
    assert [(c.host, c.rank, c.message) for c in final.culprits] == [("h0001", 2, NVLINK)]
    assert sorted(v.rank for v in final.victims) == [0, 1, 3] and final.first_sign == t(10)
    now = latest(alerts)
    critical = {fp for fp, a in now.items() if a.severity == "critical"}
    assert critical == {f"{job}/process_exit/h0001/rank2", f"{job}/error_log/h0001/xid"}
    assert all(a.evidence.get("incident_id") == final.incident_id for a in now.values()), {
        fp: (a.status, a.evidence.get("incident_id")) for fp, a in now.items()}
    victims = {fp for fp, a in now.items() if a.evidence["incident_role"] == "victim"}
    assert len(victims) == 3 and not [a for a in alerts if a.fingerprint in victims and a.severity == "critical"]
    # the kernel's NVLink Xid waited for the crash it caused: no critical alert was ever published unlinked
    assert not [a for a in alerts if a.severity == "critical" and a.evidence.get("incident_role") != "culprit"]


def test_without_flight_recorder_a_stall_names_the_rank_that_stopped_first(clickhouse_dsn: str, database: str) -> None:
    job = "stalled"
    behind = [s for s in steps(job, 2, 20) if not (s.rank == 1 and s.step >= 15)]
    alerts, incidents = run(clickhouse_dsn, database, job, [*behind, *heartbeats(job, 2, 200)])
    (hang,) = {a.fingerprint: a for a in alerts if a.alert == "collective_hang"}.values()
    assert hang.subject == "h0000/rank1" and hang.evidence["confidence"] == "weak"
    assert hang.first_seen == t(20) and hang.ts >= t(20 + AnalyzerSettings().hang.stall_s)
    assert incidents and incidents[-1].confidence == "weak" and incidents[-1].culprits[0].rank == 1
