"""The physics cases end to end: simulator -> real broker -> live AnalyzerService, faster than real time.

Two jobs stream at once. One carries a throttled GPU in a tensor-parallel host, a host slow
on about a third of its steps and a flapping NIC, through evaluation pauses, a checkpoint
and a stopped tail; the other hangs, one host first. Live, each fault raises exactly its
alert, named right (host, GPU, NIC, the hang's suspect), nothing else of severity warning
or worse; the pauses are notes (info); and the same stored telemetry replayed raises the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.waiting import wait_until
from vigil.analyzer.alerts.view import read_alert_events
from vigil.analyzer.engine import job_clocks, replay
from vigil.analyzer.service import AnalyzerService
from vigil.analyzer.settings import AnalyzerSettings
from vigil.analyzer.simulator.faults import parse_fault
from vigil.analyzer.simulator.layout import Layout
from vigil.analyzer.simulator.model import SimConfig, Simulation
from vigil.analyzer.simulator.runner import ground_truth, run
from vigil.clickhouse.client import connect
from vigil.contract import Event
from vigil.kafka.producer import EventProducer
from vigil.service import StackContext
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse, pytest.mark.slow, pytest.mark.timeout(600)]

SPEED = 6.0  # simulated seconds per wall second
JOBS: dict[str, tuple[int, list[str]]] = {  # evaluation pauses after steps 79 and 159, a checkpoint at 99
    "phys": (170, ["gpu_straggler:host=sim-host-0003,start=40,gpu=2,magnitude=0.1",
                   "intermittent:host=sim-host-0009,start=40,fraction=0.3,magnitude=0.2",
                   "nic_flap:host=sim-host-0013,start=40,nic=mlx5_1"]),
    "hung": (90, ["hang:host=sim-host-0006,start=60"]),
}


def stream(topics: VigilSettings, job: str) -> tuple[set[tuple[str, str]], datetime]:
    """Stream `job` through the broker; its expected (fingerprint, host) alerts and its newest event time."""
    steps, faults = JOBS[job]
    sim = Simulation(SimConfig(job=job, layout=Layout(hosts=16, gpus_per_host=4, pp=2),
                               faults=[parse_fault(f) for f in faults], seed=5, start=datetime.now(UTC),
                               eval_every=80, eval_s=30.0, tail_s=20.0))
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
    newest = [sim.now]

    def send(events: Sequence[Event]) -> None:
        newest[0] = max([newest[0], *(e.ts for e in events)])
        producer.send(events)

    count = run(sim, steps, send, speed=SPEED)
    producer.flush()
    truth = ground_truth(sim, steps, count)
    until = newest[0].replace(microsecond=newest[0].microsecond // 1000 * 1000)  # stored to the millisecond
    return {(f["expected"]["fingerprint"], f["host"]) for f in truth["faults"]}, until


def judged_to_the_end(service: AnalyzerService, client: Any, job: str, sent_until: datetime) -> bool:
    """Everything sent is stored, and the live cursor has no full evaluation step left before the newest event.

    (The cursor walks in `eval_step_s` steps; a replay also judges the odd last instant, less
    than a step after its last full one, which sees the same telemetry.)
    """
    clocks = job_clocks(client, job=job)
    pos = service.cursor.positions.get(job)
    step = timedelta(seconds=service.settings.eval_step_s)
    return bool(clocks and clocks[0].last_ts >= sent_until and pos is not None and pos + step > clocks[0].last_ts)


def severe(alerts: list[Any], job: str) -> set[tuple[str, str]]:
    return {(a.fingerprint, a.host) for a in alerts
            if a.job_id == job and a.status == "firing" and a.severity in ("warning", "error", "critical")}


def test_physics_faults_live_raise_exactly_their_alerts_and_equal_replay(
        topics: VigilSettings, clickhouse_dsn: str, database: str) -> None:
    bootstrap = str(topics.kafka_bootstrap)
    client = connect(clickhouse_dsn, database=database)
    ctx = StackContext(settings=topics, bootstrap=bootstrap, clickhouse=client, clickhouse_dsn=clickhouse_dsn)
    service = AnalyzerService(ctx, AnalyzerSettings(group_id=f"g-{database}", batch_s=0.3, detect_interval_s=0.5))
    service.start()
    try:
        with ThreadPoolExecutor(len(JOBS)) as pool:
            streamed = dict(zip(JOBS, pool.map(lambda job: stream(topics, job), JOBS), strict=True))
        for job, (_, until) in streamed.items():
            wait_until(lambda job=job, until=until: judged_to_the_end(service, client, job, until), 300,
                       f"the live analyzer judging {job} to its last event")
        turns = service.detect_turns  # the turn that judged the last instant has published its alerts
        wait_until(lambda: service.detect_turns > turns, 60, "one more detector turn")
        health = service.health()
    finally:
        service.stop()
    live = read_alert_events(topics, bootstrap)
    for job, (expected, _) in streamed.items():
        assert severe(live, job) == expected, (job, severe(live, job) ^ expected, health)
        assert severe(replay(client, AnalyzerSettings(), job), job) == expected, job
    gpu = next(a for a in live if a.subject == "sim-host-0003/gpu2" and a.status == "firing")
    assert gpu.evidence["gpu_readings"]["throttle_reasons"] == ["hw_slowdown"]
    flap = next(a for a in live if a.evidence.get("pattern") == "flap" and a.status == "firing")
    assert flap.evidence["flaps"] >= 3 and 15 <= flap.evidence["period_s"] <= 25
    paused = [a for a in live if a.job_id == "phys" and a.subject == "job" and a.status == "firing"]
    assert paused and {a.severity for a in paused} == {"info"}  # evaluations and the end: notes, not warnings
    hang = next(a for a in live if a.job_id == "hung" and a.subject == "job" and a.severity == "warning")
    assert hang.evidence["suspect"] == "sim-host-0006"
    assert health["rejected"] == 0
