"""The live cursor judges every instant of a burst, fairly between jobs, across a restart: live == replay."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from test_detectors import caught_up, load

from vigil.analyzer.alerts.book import AlertBook
from vigil.analyzer.engine import LiveCursor, replay
from vigil.analyzer.positions import MemoryPositions
from vigil.analyzer.settings import AnalyzerSettings
from vigil.analyzer.simulator.faults import parse_fault
from vigil.analyzer.simulator.layout import Layout
from vigil.analyzer.simulator.model import SimConfig, Simulation
from vigil.clickhouse.client import connect
from vigil.contract import Alert, Event

pytestmark = pytest.mark.clickhouse

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
FAULTS = ["straggler:host=sim-host-0003,start=40,magnitude=0.08", "nic_drop:host=sim-host-0005,start=30,duration=40",
          "traffic_stop:host=sim-host-0006,start=60", "heartbeat_loss:host=sim-host-0007,start=50",
          "xid:host=sim-host-0001,start=70", "process_exit:host=sim-host-0002,start=80,local_rank=1"]


def simulated(job: str, steps: int, seed: int = 5) -> list[list[Event]]:
    sim = Simulation(SimConfig(job=job, layout=Layout(hosts=8, gpus_per_host=2), seed=seed, start=T0,
                               faults=[parse_fault(f) for f in FAULTS]))
    return [[sim.registration()], *(sim.step(i) for i in range(steps))]


def key(alerts: list[Alert]) -> list[tuple[str, str, str, datetime]]:
    return [(a.fingerprint, a.status, a.severity, a.ts) for a in alerts]


def test_a_burst_is_judged_at_every_instant_across_an_analyzer_restart_as_replay_judges_it(
        clickhouse_dsn: str, database: str) -> None:
    batches = simulated("burst", 110)
    client = connect(clickhouse_dsn, database=database)
    settings = AnalyzerSettings(max_catchup=7, turn_budget_s=0.2)
    store = MemoryPositions()
    book = AlertBook(refresh_s=settings.refresh_s)
    cursor = LiveCursor(settings=settings, book=book, store=store)
    live: list[Alert] = []
    now = datetime.now(UTC)
    for k, chunk in enumerate((batches[:30], batches[30:60], batches[60:])):
        load(clickhouse_dsn, database, [e for b in chunk for e in b])  # a burst: far faster than real time
        live += caught_up(cursor, client, now)
        cursor.commit()
        if k == 1:  # the analyzer restarts: positions from the store, the book from the alerts topic
            book = AlertBook(refresh_s=settings.refresh_s)
            book.restore(live)
            cursor = LiveCursor(settings=settings, book=book, store=store)
    # the job ends: nothing more arrives, every source goes idle and its last instants are judged
    live += caught_up(cursor, client, datetime.now(UTC) + timedelta(seconds=settings.watermark_idle_s + 1))
    expected = replay(client, settings, "burst")
    assert {a.alert for a in expected} >= {"straggler", "traffic_stall", "heartbeat_loss", "error_log", "process_exit"}
    assert key(live) == key(expected)


def test_jobs_with_a_backlog_take_turns(clickhouse_dsn: str, database: str) -> None:
    for job in ("a", "b"):
        load(clickhouse_dsn, database, [e for b in simulated(job, 30) for e in b])
    client = connect(clickhouse_dsn, database=database)
    cursor = LiveCursor(settings=AnalyzerSettings(turn_budget_s=1e-6), book=AlertBook())
    end = datetime.now(UTC) + timedelta(minutes=1)  # everything stored: both jobs have stopped
    first: dict[str, Any] = {}
    for _ in range(3):
        cursor.turn(client, end)
        first = first or dict(cursor.positions)
    assert set(first) == {"a", "b"} and first["a"] == first["b"]  # a turn judges one instant of each in turn
    assert cursor.positions["a"] == cursor.positions["b"] == first["a"] + timedelta(seconds=4) and cursor.backlog
