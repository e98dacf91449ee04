"""The live cursor judges every instant of a burst, fairly between jobs, across a restart: live == replay."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.detectors import caught_up, load
from tests.support.live_cursor import T0, key, simulated
from vigil.analyzer.alerts.book import AlertBook
from vigil.analyzer.engine import LiveCursor, replay
from vigil.analyzer.positions import MemoryPositions
from vigil.analyzer.settings import AnalyzerSettings
from vigil.analyzer.simulator.faults import parse_fault
from vigil.analyzer.simulator.layout import Layout
from vigil.analyzer.simulator.model import SimConfig, Simulation
from vigil.clickhouse.client import connect
from vigil.contract import Alert, Event, LogLine

pytestmark = pytest.mark.clickhouse


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


def test_an_xid_pages_within_seconds_though_the_job_hangs_right_after(clickhouse_dsn: str, database: str) -> None:
    """A hard fault pages whatever the job does next: the job's steps stop at step 62 (a hang: heartbeats and NICs
    go on) and the Xid line comes a second later, newer than any step event, so no step moves the watermark past
    it. Fed at the job's own pace around the fault (one step a second, as its agents ship), the silent step sources
    are let go once the job's other sources are `watermark_gone_lag_s` ahead, and the `error_log` page is raised
    before telemetry 15 s past the line has arrived."""
    sim = Simulation(SimConfig(job="xh", layout=Layout(hosts=8, gpus_per_host=2), seed=1, start=T0,
                               faults=[parse_fault("hang:host=sim-host-0005,start=62")], tail_s=40.0))
    batches: list[list[Event]] = [[sim.registration()], *(sim.step(i) for i in range(100)), sim.tail(40.0)]
    onset = sim.step_starts[62] + timedelta(seconds=1)
    batches[1 + 62].append(LogLine(  # in the batch of step 62, as the agent ships it
        event_id="xh-xid-1", job_id="xh", host="sim-host-0005", ts=onset, rank=10, local_rank=0, stream="stderr",
        category="xid", severity="critical", xid=79, source="kernel", action="reboot_then_check",
        message="NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus."))
    client = connect(clickhouse_dsn, database=database)
    settings = AnalyzerSettings()
    cursor = LiveCursor(settings=settings, book=AlertBook(refresh_s=settings.refresh_s))
    live: list[Alert] = []
    paged_with: datetime | None = None  # the newest event time fed when the page was raised
    load(clickhouse_dsn, database, [e for b in batches[:56] for e in b])  # the healthy start, in a burst
    caught_up(cursor, client, datetime.now(UTC))
    for b in batches[56:]:  # then one step a second: the pace the wall-clock idleness rules are made for
        t0 = time.monotonic()
        load(clickhouse_dsn, database, b)
        got = caught_up(cursor, client, datetime.now(UTC))
        live += got
        if paged_with is None and any(a.alert == "error_log" and a.status == "firing" for a in got):
            paged_with = max(e.ts for e in b)
        if paged_with is not None and (paged_with - onset).total_seconds() > 30:
            break  # paged: the rest of the job adds nothing to this test
        time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
    assert paged_with is not None and (paged_with - onset).total_seconds() <= 15, (paged_with, onset, key(live))
    (xid,) = [a for a in live if a.fingerprint == "xh/error_log/sim-host-0005/xid" and a.status == "firing"][:1]
    assert xid.severity == "critical"


def test_a_catch_up_turn_publishes_what_it_raised_before_its_last_instants(clickhouse_dsn: str, database: str) -> None:
    """A turn with many instants waiting (the watermark held by a stalled host, then let go) hands the alerts of
    its first instants to `publish` while it judges the rest: a lost host pages at once, not at the turn's end.
    What was published and what the turn returned are, together and in order, what replay raises."""
    load(clickhouse_dsn, database, [e for b in simulated("early", 110) for e in b])
    client = connect(clickhouse_dsn, database=database)
    settings = AnalyzerSettings(max_catchup=1000, turn_budget_s=600)
    cursor = LiveCursor(settings=settings, book=AlertBook(refresh_s=settings.refresh_s))
    published: list[tuple[list[Alert], datetime]] = []
    returned = cursor.turn(client, datetime.now(UTC) + timedelta(minutes=1),
                           publish=lambda alerts: published.append((list(alerts), cursor.positions["early"])))
    end = cursor.positions["early"]
    lost = [at for alerts, at in published if any(a.alert == "heartbeat_loss" and a.status == "firing" for a in alerts)]
    assert lost and lost[0] < end - timedelta(seconds=30)  # paged with more than 30 s of instants still to judge
    assert key([a for alerts, _at in published for a in alerts] + returned) == key(replay(client, settings, "early"))


def test_a_catch_up_turn_starts_no_round_its_budget_cannot_hold(clickhouse_dsn: str, database: str) -> None:
    """A turn of a backlog stops before a round as long as the longest of the last ones would carry it past its
    budget: after the first rounds are known, every turn lasts at most its budget (or one round), and every instant
    is still judged. The rounds' costs are given by a clock the test advances (the detectors' real cost varies by
    instant: at 10,000 GPUs 0.2-1.8 s, the costly ones on every other or fourth instant)."""
    load(clickhouse_dsn, database, [e for b in simulated("budget", 40) for e in b])
    client = connect(clickhouse_dsn, database=database)
    now = [0.0]
    costs = iter([0.3, 1.2, 0.4, 0.9] * 100)  # a cycle of the costly detectors' cadences
    cursor = LiveCursor(settings=AnalyzerSettings(turn_budget_s=2.0), book=AlertBook(), clock=lambda: now[0])
    judge = cursor._judge

    def costly(*args: Any) -> Any:
        now[0] += next(costs)
        return judge(*args)

    cursor._judge = costly  # type: ignore[method-assign]
    end = datetime.now(UTC) + timedelta(minutes=1)  # everything stored: the job has stopped
    turns: list[tuple[float, int]] = []
    while True:
        t0, judged = now[0], cursor.instants_judged
        cursor.turn(client, end)
        turns.append((now[0] - t0, cursor.instants_judged - judged))
        if not cursor.backlog:
            break
    whole = LiveCursor(settings=AnalyzerSettings(turn_budget_s=600, max_catchup=1000), book=AlertBook())
    whole.turn(client, end)  # the same instants in one turn
    assert sum(n for _, n in turns) == whole.instants_judged and cursor.positions == whole.positions
    assert all(d <= 2.0 or n == 1 for d, n in turns[1:]), f"a turn ran past its budget: {turns}"
    assert any(n > 1 for _, n in turns[1:]), f"no later turn held two rounds: {turns}"
