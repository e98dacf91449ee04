"""A catch-up through the real broker: the analyzer stopped while jobs stream, then started (issue 50).

Four jobs stream faster than real time (three of 8 hosts, one of 64): the first 30 s with the analyzer running;
then it stops and the rest arrives while it is down, the heavy topics (steps, NIC samples) produced a minute of
event time behind the heartbeats (`topic_skew`). Started again, it restores its books from the topics and its positions from
ClickHouse and catches up — the light topic ingested first, the heavy ones behind it. Nothing it publishes differs
from a replay of the stored history, and no healthy job is paged: no verdict on data still in flight.

What it guards is the restart path as a whole (books restored, positions resumed, a backlog read across topics). It
passes on the rule before issue 50 too: a restarted service judges nothing until the ends its first lag sample read
are all stored, so with nothing produced during the catch-up no topic is ever judged ahead of another. The skew
itself, a heavy topic's partitions behind while production goes on, is tests/analyzer/test_topic_skew.py's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.support.replay import as_live, by_job, judged_to_the_end, key, live, simulation
from vigil.analyzer.alerts.view import read_alert_events
from vigil.analyzer.engine import replay
from vigil.analyzer.settings import AnalyzerSettings, HangSettings
from vigil.analyzer.simulator.delivery import Delivery, Run, cut, deliver, topic_skew
from vigil.clickhouse.client import connect
from vigil.contract import Event
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse, pytest.mark.slow, pytest.mark.chaos]

JOBS = {  # job -> (hosts, faults)
    "c0": (8, ["straggler:host=sim-host-0002,start=20,magnitude=0.1"]),
    "c1": (8, []),
    "c2": (8, ["heartbeat_loss:host=sim-host-0005,start=40"]),
    "big": (64, []),
}


def runs(start: datetime) -> list[Run]:
    return [Run(sim=simulation(job, hosts, start + timedelta(seconds=2 * k), faults, seed=k, step_ms=500),
                steps=range(200)) for k, (job, (hosts, faults)) in enumerate(JOBS.items())]


SHORT = {"watermark_max_lag_s": 20.0, "hang": HangSettings(stall_s=20)}
"""The issue's minutes in seconds, live and in replay: the watermark's cap and a weak-evidence stall 20 s."""


def test_an_analyzer_stopped_while_jobs_stream_catches_up_as_replay_judges(topics: VigilSettings,
                                                                           clickhouse_dsn: str, database: str) -> None:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
    sent: list[Event] = []
    deliver(runs(start), sent.extend, Delivery())
    ends = {job: max(e.ts for e in sent if e.job_id == job) for job in JOBS}
    first, rest = cut(sent, start + timedelta(seconds=30))
    late = topic_skew({"steps": 60.0, "nic": 60.0})  # what arrives while it is down: heavy topics a minute behind
    rest.sort(key=lambda e: e.ts + timedelta(seconds=late(e)))
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
    with live(topics, clickhouse_dsn, database, **SHORT) as service:  # type: ignore[arg-type]
        producer.send(first)
        producer.flush()
        judged_to_the_end(service, {"big": start + timedelta(seconds=20)})  # part judged, then it stops
    producer.send(rest)  # the analyzer is down: everything else arrives meanwhile
    producer.flush()
    with live(topics, clickhouse_dsn, database, **SHORT) as service:  # type: ignore[arg-type]
        judged_to_the_end(service, ends, timeout=300)
        assert service.cursor.errors == []
    alerts = read_alert_events(topics, str(topics.kafka_bootstrap))
    client = connect(clickhouse_dsn, database=database)
    for job, (_hosts, faults) in JOBS.items():
        expected = replay(client, AnalyzerSettings(**SHORT), job, stages=as_live())  # type: ignore[arg-type]
        assert key(by_job(alerts, job)) == key(expected), job
        paged = {a.fingerprint for a in by_job(alerts, job) if a.status == "firing" and a.severity != "info"}
        if not faults:
            assert paged == set(), job  # a healthy job: no false page
    fired = {a.fingerprint for a in alerts if a.status == "firing"}
    assert {"c0/straggler/sim-host-0002/forward", "c2/heartbeat_loss/sim-host-0005"} <= fired
