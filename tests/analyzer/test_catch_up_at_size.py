"""The catch-up chaos test at the issue's size, through the real broker (issue 50).

Ten jobs stream faster than real time: one of 512 hosts, nine of 8 (two with faults: a straggler, a heartbeat
loss). The analyzer judges the first 30 s of event time, then stops; the next five minutes of event time arrive while
it is down, the heavy topics (steps, NIC samples) a minute behind the heartbeats and one host of the big job's
partition half a minute further back (`topic_skew`). Started again, it catches up, and in each case something goes
wrong mid-catch-up:

- `restart`: nothing more (the analyzer's own restart is the fault);
- `broker_outage`: the broker goes away for a while and comes back with its data. The embedded broker keeps its log
  in memory only, so a real restart would lose it, and a TCP proxy cannot stand in front of it (its clients connect to
  the address it advertises, its own port): its process is paused (SIGSTOP) and resumed instead, the stand-in for a
  restart (tests/support/outage.py);
- `rebalance`: a second ingest-only instance joins the analyzer's consumer group, reads part of the backlog, and
  leaves: two rebalances, partitions handed over with batches in flight.

In every case what it publishes equals, job by job, a replay of the stored history, and no healthy job is paged (no
non-info alert, no incident): no verdict on data still in flight. Each case checks that its fault struck while the
catch-up was still under way. The events are generated once for the module and sent to each case's own topics, on a
broker of the module's own (the one it pauses).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.outage import pause_broker
from tests.support.replay import as_live, by_job, judged_to, judged_to_the_end, key, live, simulation
from tests.support.waiting import wait_until
from vigil.analyzer.alerts.view import read_alert_events
from vigil.analyzer.engine import replay
from vigil.analyzer.incidents.view import read_incident_events
from vigil.analyzer.service import AnalyzerService
from vigil.analyzer.settings import AnalyzerSettings, HangSettings
from vigil.analyzer.simulator.delivery import Delivery, Run, cut, deliver, topic_skew
from vigil.analyzer.simulator.layout import Layout
from vigil.analyzer.simulator.model import SimConfig, Simulation
from vigil.clickhouse.client import connect
from vigil.contract import Event
from vigil.kafka.admin import ensure_topics
from vigil.kafka.broker import EmbeddedBroker
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse, pytest.mark.slow, pytest.mark.chaos,
              pytest.mark.timeout(900)]  # a case: ~5 min live, then ten jobs replayed on a shared 2-core machine

FAULTS = {  # the small jobs with a fault; the rest of c0..c8 and "big" are healthy
    "c0": ["straggler:host=sim-host-0002,start=20,magnitude=0.1"],
    "c1": ["heartbeat_loss:host=sim-host-0005,start=40"],
}
SMALL = [f"c{k}" for k in range(9)]
RUNNING_S = 30  # event time judged before the analyzer stops
DOWN_S = 300  # event time that arrives while it is down: the five minutes
OUTAGE_S = 8.0  # the broker's pause (the fault's length)
SHORT = {"watermark_max_lag_s": 20.0, "hang": HangSettings(stall_s=20)}
"""The issue's minutes in seconds, live and in replay: the watermark's cap and a weak-evidence stall 20 s."""


def runs(start: datetime) -> list[Run]:
    span = RUNNING_S + DOWN_S + 10
    # 512 hosts at a slower cadence (a step, a heartbeat every 5 s, a NIC sample every 10 s): ~75k events
    big = Simulation(SimConfig(job="big", layout=Layout(hosts=512, gpus_per_host=1), seed=99, start=start,
                               step_ms=5000, heartbeat_s=5.0, nic_s=10.0, nics=1))
    small = [Run(sim=simulation(job, 8, start + timedelta(seconds=k), FAULTS.get(job, []), seed=k, step_ms=2000,
                                nics=1), steps=range(span // 2)) for k, job in enumerate(SMALL)]
    return [Run(sim=big, steps=range(span // 5)), *small]


@dataclass(frozen=True)
class Stream:
    start: datetime
    first: list[Event]  # arrives while the analyzer runs
    rest: list[Event]  # arrives while it is down, heavy topics skewed behind the light one
    ends: dict[str, datetime]


@pytest.fixture(scope="module")
def stream() -> Stream:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=15)
    sent: list[Event] = []
    deliver(runs(start), sent.extend, Delivery())
    ends: dict[str, datetime] = {}
    for e in sent:
        ends[e.job_id] = max(e.ts, ends.get(e.job_id, e.ts))
    first, rest = cut(sent, start + timedelta(seconds=RUNNING_S))
    late = topic_skew({"steps": 60.0, "nic": 60.0}, hosts={"sim-host-0300": 30.0})
    rest.sort(key=lambda e: e.ts + timedelta(seconds=late(e)))
    return Stream(start=start, first=first, rest=rest, ends=ends)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    own = EmbeddedBroker(log_path=tmp_path_factory.mktemp("broker") / "tansu.log")
    own.start()
    yield own
    own.stop()


@pytest.fixture
def on_own_broker(settings: VigilSettings, broker: EmbeddedBroker) -> VigilSettings:
    """This test's settings on the module's broker, its topics created."""
    mine = settings.model_copy(update={"kafka_bootstrap": broker.bootstrap})
    ensure_topics(mine, broker.bootstrap)
    return mine


def mid_catch_up(service: AnalyzerService, stream: Stream, fraction: float = 0.1) -> None:
    """Wait until the restarted analyzer has ingested part of the backlog (the fault strikes then)."""
    assert service.ingest is not None
    ingest = service.ingest
    wait_until(lambda: ingest.stats.events >= fraction * len(stream.rest), 600, "the catch-up under way", every=0.2)


def strike(case: str, service: AnalyzerService, stream: Stream, topics: VigilSettings, clickhouse_dsn: str,
           database: str, broker: EmbeddedBroker) -> None:
    mid_catch_up(service, stream)
    assert not judged_to(service, stream.ends), "caught up before the fault: it would test nothing"
    if case == "broker_outage":
        assert broker.pid is not None
        pause_broker(broker.pid, OUTAGE_S)
    elif case == "rebalance":
        assert service.ingest is not None
        ingest = service.ingest
        before = ingest.stats.rebalances
        with live(topics, clickhouse_dsn, database, detect=False, **SHORT) as second:  # type: ignore[arg-type]
            assert second.ingest is not None
            other = second.ingest
            wait_until(lambda: ingest.stats.rebalances > before and other.stats.events > 0, 300,
                       "the second member to join the ingest group and read part of the backlog")
        wait_until(lambda: ingest.stats.rebalances > before + 1, 300, "the group to rebalance as the member left")
    assert not judged_to(service, stream.ends), "caught up during the fault: it struck after the catch-up"


@pytest.mark.parametrize("case", [
    pytest.param("restart", marks=pytest.mark.scale),  # broker_outage restarts the analyzer too
    pytest.param("broker_outage", marks=pytest.mark.scale),  # minutes each: the suite's budget is 50 on 2 cores
    pytest.param("rebalance", marks=pytest.mark.scale),
])
def test_a_catch_up_at_size_with_a_fault_mid_way_publishes_what_replay_does(
        case: str, stream: Stream, on_own_broker: VigilSettings, broker: EmbeddedBroker, clickhouse_dsn: str,
        database: str) -> None:
    topics = on_own_broker
    producer = EventProducer(settings=topics, bootstrap=broker.bootstrap)
    with live(topics, clickhouse_dsn, database, **SHORT) as service:  # type: ignore[arg-type]
        producer.send(stream.first)
        producer.flush()
        judged_to_the_end(service, {"big": stream.start + timedelta(seconds=RUNNING_S - 10)})  # part judged, stop
    producer.send(stream.rest)  # the analyzer is down: five minutes of event time arrive meanwhile
    producer.flush()
    with live(topics, clickhouse_dsn, database, **SHORT) as service:  # type: ignore[arg-type]
        strike(case, service, stream, topics, clickhouse_dsn, database, broker)
        judged_to_the_end(service, stream.ends, timeout=900)
        assert service.cursor.errors == []
    alerts = read_alert_events(topics, broker.bootstrap)
    incidents = read_incident_events(topics, broker.bootstrap)
    client = connect(clickhouse_dsn, database=database)
    figures = []
    for job in stream.ends:
        expected = replay(client, AnalyzerSettings(**SHORT), job, stages=as_live())  # type: ignore[arg-type]
        mine = by_job(alerts, job)
        figures.append(f"{job} live {len(mine)}/{len({a.fingerprint for a in mine})} replay "
                       f"{len(expected)}/{len({a.fingerprint for a in expected})}")  # events/alerts
        assert key(by_job(alerts, job)) == key(expected), job
        if job not in FAULTS:  # a healthy job: no false page
            assert {a.fingerprint for a in by_job(alerts, job) if a.status == "firing" and a.severity != "info"} \
                == set(), job
            assert [i.incident_id for i in incidents if i.job_id == job] == [], job
    print(f"catch-up {case}: " + "; ".join(figures))
    fired = {a.fingerprint for a in alerts if a.status == "firing"}
    assert {"c0/straggler/sim-host-0002/forward", "c1/heartbeat_loss/sim-host-0005"} <= fired
