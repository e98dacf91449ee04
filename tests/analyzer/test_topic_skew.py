"""No verdict on data in flight: a catch-up where the heartbeats (a light topic) are ingested minutes of event time
ahead of the steps and NIC samples (heavy topics), one host's NIC partition further behind still (issue 50).

The rule before: the watermark never trailed a job's newest dense timestamp by more than `watermark_max_lag_s`, so
the steps were let go as silent and judged: a `collective_hang` "weak evidence, no step for N s while its processes
run", and windows of the lagging host's NICs judged with their samples in flight (`traffic_stall` at 512 hosts),
on data merely behind. Now a source whose topic is not caught up
holds the watermark, and the weak-evidence stall waits for the step topic to be caught up to the heartbeats' time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.support.detectors import caught_up, load
from tests.support.gone_lag import sql_time, steps_insert
from vigil.analyzer.alerts.book import AlertBook
from vigil.analyzer.clock import topic_behind
from vigil.analyzer.detect.base import EvalContext, NotYet
from vigil.analyzer.detect.hang import CHECKED, HangDetector
from vigil.analyzer.engine import LiveCursor, replay
from vigil.analyzer.settings import AnalyzerSettings, HangSettings
from vigil.analyzer.simulator.delivery import Delivery, Run, cut, deliver, topic_skew
from vigil.analyzer.simulator.layout import Layout
from vigil.analyzer.simulator.model import SimConfig, Simulation
from vigil.clickhouse.client import connect
from vigil.contract import Alert, Event
from vigil.kafka.lag import LagProbe
from vigil.settings import VigilSettings

pytestmark = pytest.mark.clickhouse

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
LAG_S = 90.0  # the steps behind the heartbeats and NIC samples (the 30 s cap below and a stall of 30 s: > 60)
SLOW_HOST = "sim-host-0002"  # its partitions 40 s further behind


def skewed(job: str) -> tuple[list[Event], datetime]:
    """A healthy job of 4 hosts for 200 s, as a consumer catching up reads it: (delivery order, last event time). Steps
    300 s behind the heartbeats and NIC samples, and SLOW_HOST's steps and NICs 130 s behind its topics' others."""
    sim = Simulation(SimConfig(job=job, layout=Layout(hosts=4, gpus_per_host=1), seed=3, start=T0))
    sent: list[Event] = []
    late = topic_skew({"steps": LAG_S, "nic": 0.0}, hosts={SLOW_HOST: 40.0})
    deliver([Run(sim=sim, steps=range(200))], sent.extend, Delivery(late=late))
    return sent, max(e.ts for e in sent)


def key(alerts: list[Alert]) -> list[tuple[str, str, datetime]]:
    return [(a.fingerprint, a.status, a.ts) for a in alerts]


def firing(alerts: list[Alert]) -> set[str]:
    return {a.fingerprint for a in alerts if a.status == "firing"}


def behind(now: datetime) -> dict[str, datetime]:
    """The probe's topic frontiers mid catch-up: heartbeats and the rest current, steps and NICs minutes behind."""
    old = now - timedelta(minutes=3)
    return {"jobs": now, "heartbeats": now, "logs": now, "collectives": now, "steps": old, "nic": old}


def test_a_heavy_topic_behind_a_light_one_is_behind_not_silent(clickhouse_dsn: str, database: str) -> None:
    sent, end = skewed("skew")
    first, rest = cut(sent, end - timedelta(seconds=20))  # heartbeats up to 20 s before the end, steps ~110 s
    load(clickhouse_dsn, database, first)
    client = connect(clickhouse_dsn, database=database)
    # the minutes of the issue in seconds: the watermark's cap and the stall both 30 s (120 s by default)
    s = AnalyzerSettings(max_catchup=400, watermark_max_lag_s=30, hang=HangSettings(stall_s=30))
    now = datetime.now(UTC)

    # the rule before: nothing told the cursor that the steps' and NICs' topics are behind
    old = LiveCursor(settings=s, book=AlertBook(refresh_s=s.refresh_s))
    raised = firing(caught_up(old, client, now))
    assert {f for f in raised if f.startswith("skew/collective_hang/")}  # weak evidence: SLOW_HOST "stopped first"
    slow_nic = max(e.ts for e in first if e.kind == "nic" and e.host == SLOW_HOST)
    # ... and judged its NIC windows with their samples in flight (this simulator's NICs sample at one phase of the
    # step, so a partial window reads no drop here; at 512 hosts it paged traffic_stall on all four NICs of a host)
    assert old.positions["skew"] > slow_nic

    cursor = LiveCursor(settings=s, book=AlertBook(refresh_s=s.refresh_s))
    live = caught_up(cursor, client, now, topics=behind(now))
    assert firing(live) == set()
    steps = max(e.ts for e in first if e.kind == "step")
    assert cursor.positions["skew"] <= min(steps, slow_nic)  # judged no further than every source stored

    load(clickhouse_dsn, database, rest)  # caught up: every topic current
    now = datetime.now(UTC)
    live += caught_up(cursor, client, now, topics={t: now for t in behind(now)})
    live += caught_up(cursor, client, now + timedelta(seconds=s.watermark_idle_s + 1),
                      topics={t: now for t in behind(now)})  # the job ends: its last instants
    expected = replay(client, s, "skew")
    assert firing(expected) == set()  # a healthy job
    assert key(live) == key(expected)


@pytest.mark.pure
def test_one_partition_behind_holds_its_topic_back_and_only_its_topic() -> None:
    probe = LagProbe(settings=VigilSettings(), bootstrap="unused:9092", group_id="g", topics=["steps", "heartbeats"])
    names = {"steps": "steps", "heartbeats": "heartbeats"}
    ends = {("steps", 0): 10, ("steps", 1): 50, ("heartbeats", 0): 5}
    probe.advance_topics(100.0, ends, {("steps", 0): 10, ("steps", 1): 20, ("heartbeats", 0): 5}, names)
    assert probe.topic_frontiers == {"heartbeats": 100.0}  # partition 1 of steps has 30 records to go
    probe.advance_topics(101.0, {**ends, ("steps", 1): 60}, {("steps", 0): 10, ("steps", 1): 55, ("heartbeats", 0): 5},
                          names)
    assert probe.topic_frontiers == {"heartbeats": 101.0, "steps": 100.0}  # past the ends of the first sample only
    now = datetime.fromtimestamp(101.0, UTC)
    frontiers = {t: datetime.fromtimestamp(f, UTC) for t, f in probe.topic_frontiers.items()}
    assert topic_behind(frontiers, now + timedelta(seconds=4.5), 5.0) == {"step", "nic"}  # nic: never sampled
    assert topic_behind(frontiers, now, 5.0) == {"nic"}
    assert topic_behind(None, now, 5.0) == frozenset()


def test_a_weak_evidence_stall_waits_for_the_step_topic_to_reach_the_heartbeats_time(clickhouse_dsn: str,
                                                                                     database: str) -> None:
    """Steps stop at 20 s, heartbeats of running processes go on to 60 s (stall 30 s): the stall is judged only once
    the step topic's frontier has passed the time those heartbeats were ingested; its evidence says what it checked."""
    client = connect(clickhouse_dsn, database=database)
    now = datetime.now(UTC)
    steps = [T0 + timedelta(seconds=i) for i in range(1, 21)]
    client.command(steps_insert("stall", "h0", steps, [now] * len(steps)))
    beats = ", ".join(f"('stall-b{i}', 'stall', 'h0', {sql_time(T0 + timedelta(seconds=2 * i))}, 2.0, 1, {sql_time(now)})"
                      for i in range(31))
    client.command(f"INSERT INTO heartbeats (event_id, job_id, host, ts, interval_s, procs_running, ingested_at) "
                   f"VALUES {beats}")
    s = AnalyzerSettings(hang=HangSettings(stall_s=30))
    at = T0 + timedelta(seconds=60)

    def judged(steps_frontier: datetime | None) -> list[object]:
        frontiers = None if steps_frontier is None else {"steps": steps_frontier, "heartbeats": now}
        ctx = EvalContext(client=client, settings=s, job="stall", at=at, live=True, frontiers=frontiers)
        return list(HangDetector().detect(ctx))

    with pytest.raises(NotYet):
        judged(now - timedelta(seconds=30))  # steps produced before the heartbeats' ingest may be in flight
    [found] = judged(now + timedelta(seconds=1))
    assert found.evidence["checked"] == CHECKED  # type: ignore[attr-defined]
    assert [f.evidence for f in judged(None)] == [found.evidence]  # type: ignore[attr-defined]  # replay: the same
