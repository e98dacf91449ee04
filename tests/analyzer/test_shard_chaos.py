"""Three detecting analyzers split the jobs through the real broker; one stops mid-run and its jobs move (issue 50).

Nine small jobs stream faster than real time to three analyzers with `detect_shards` on (each also ingests: one
shared ingest group). The `vigil-detect` group gives each job to one of them. Once the first part of the history is
judged, the analyzer owning the most jobs stops; the rest arrives and the other two take its jobs over from their
saved positions, with their books restored from the topics. Sampled all along, no job is ever owned by two shards;
at the end, per job, the alerts on the topic equal a single-analyzer replay: none lost, none raised twice.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.replay import as_live, by_job, key, live, simulation
from tests.support.waiting import wait_until
from vigil.analyzer.alerts.view import read_alert_events
from vigil.analyzer.clock import grid_ceil
from vigil.analyzer.engine import replay
from vigil.analyzer.service import AnalyzerService
from vigil.analyzer.settings import AnalyzerSettings
from vigil.analyzer.shard import PARTITIONS
from vigil.analyzer.simulator.delivery import Delivery, Run, cut, deliver
from vigil.clickhouse.client import connect
from vigil.contract import Event
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse, pytest.mark.slow, pytest.mark.chaos]

FAULTS = {"s0": ["straggler:host=sim-host-0002,start=20,magnitude=0.1"], "s4": ["heartbeat_loss:host=sim-host-0003,"
                                                                                  "start=60"],
          "s7": ["process_exit:host=sim-host-0001,start=70,local_rank=0"]}
JOBS = [f"s{k}" for k in range(9)]


def runs(start: datetime) -> list[Run]:
    return [Run(sim=simulation(job, 6 if job == "s0" else 4, start + timedelta(seconds=k), FAULTS.get(job, []),
                               seed=k, step_ms=500), steps=range(160)) for k, job in enumerate(JOBS)]


def owners(shards: list[AnalyzerService], job: str) -> list[int]:
    return [i for i, s in enumerate(shards) if s.owner is not None and s.owner.owns(job)]


def judged(shards: list[AnalyzerService], until: dict[str, datetime]) -> bool:
    """Every job judged up to `until` by the shard that owns it now, and nothing waiting."""
    for job, end in until.items():
        own = owners(shards, job)
        if len(own) != 1:
            return False
        cursor = shards[own[0]].cursor
        if cursor.positions.get(job, end - timedelta(days=1)) < end or cursor.backlog:
            return False
    return True


def test_a_stopped_shards_jobs_are_judged_by_another_and_alerts_equal_replay(topics: VigilSettings,
                                                                           clickhouse_dsn: str, database: str) -> None:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
    sent: list[Event] = []
    deliver(runs(start), sent.extend, Delivery())
    step = AnalyzerSettings().eval_step_s
    ends = {job: grid_ceil(max(e.ts for e in sent if e.job_id == job), step) for job in JOBS}
    first, rest = cut(sent, start + timedelta(seconds=45))
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
    twice: list[str] = []
    stop_sampling = threading.Event()
    with ExitStack() as stack:
        shards = [stack.enter_context(live(topics, clickhouse_dsn, database, detect_shards=True))  # type: ignore[arg-type]
                  for _ in range(3)]

        def sample() -> None:  # no job is ever owned by two shards at once
            while not stop_sampling.wait(0.05):
                twice.extend(job for job in JOBS if len(owners(shards, job)) > 1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        wait_until(lambda: all(s.owner is not None and s.owner.owned for s in shards)
                   and sum(len(s.owner.owned or ()) for s in shards) == PARTITIONS, 120,
                   "the three shards sharing the partitions")
        producer.send(first)
        producer.flush()
        wait_until(lambda: judged(shards, {j: start + timedelta(seconds=30) for j in JOBS}), 180,
                   "every job's first part judged by its owner")
        held = [[j for j in JOBS if owners(shards, j) == [i]] for i in range(3)]
        gone = max(range(3), key=lambda i: len(held[i]))
        assert held[gone], "the stopped shard owned no job: the handover is not tested"
        shards[gone].stop()  # its last turn is published and saved, then it leaves the group
        survivors = [s for i, s in enumerate(shards) if i != gone]
        producer.send(rest)
        producer.flush()
        wait_until(lambda: judged(survivors, ends), 240, "every job judged to its end by the two left")
        for job in held[gone]:  # judged on by another, from where the stopped one saved it
            assert len(owners(survivors, job)) == 1
        stop_sampling.set()
        sampler.join()
        assert all(s.cursor.errors == [] for s in survivors)
    assert twice == []
    alerts = read_alert_events(topics, str(topics.kafka_bootstrap))
    assert len({a.event_id for a in alerts}) == len(alerts)
    client = connect(clickhouse_dsn, database=database)
    for job in JOBS:
        expected = replay(client, AnalyzerSettings(), job, stages=as_live())
        assert key(by_job(alerts, job)) == key(expected), job
    fired = {a.fingerprint for a in alerts if a.status == "firing"}
    assert {"s0/straggler/sim-host-0002/forward", "s4/heartbeat_loss/sim-host-0003"} <= fired
