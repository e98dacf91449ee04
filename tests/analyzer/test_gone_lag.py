"""The watermark's gone-lag learnt per source (analyzer/delivery.py): a steadily shipped host that goes silent is let
go after a few seconds, a bursty one is waited for as long as its bursts need, and live == replay either way."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.detectors import caught_up, load
from tests.support.gone_lag import sql_time, steps_insert
from tests.support.longjob import selected
from vigil.analyzer import delivery
from vigil.analyzer.alerts.book import AlertBook
from vigil.analyzer.clock import clock_of, job_clocks
from vigil.analyzer.delivery import MARGIN_S, gone_lags, learnt_lag
from vigil.analyzer.detect.base import ch_time
from vigil.analyzer.engine import LiveCursor, replay
from vigil.analyzer.settings import AnalyzerSettings
from vigil.analyzer.simulator.faults import parse_fault
from vigil.analyzer.simulator.layout import Layout
from vigil.analyzer.simulator.model import SimConfig, Simulation
from vigil.clickhouse.client import connect
from vigil.contract import Alert, Event

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


def test_learnt_lag_is_how_far_the_source_can_lag_its_job_within_floor_and_cap() -> None:
    # its events 1 s apart, delivered 1-2 s after they happen, the job's quickest 1 s: it lags by less than 1 + 2 - 1
    assert learnt_lag(30, 1.0, 2.0, 1.0, floor_s=3, cap_s=10) == 2.0 + MARGIN_S
    assert learnt_lag(30, 0.1, 0.2, 0.1, floor_s=3, cap_s=10) == 3  # never under the floor
    assert learnt_lag(30, 1.0, 9.0, 1.0, floor_s=3, cap_s=10) == 10  # bursts of 8 s: the cap
    assert learnt_lag(30, 1.0, 5.0, 1.0, floor_s=3, cap_s=10) == 7  # 3 s later than the rest of its job: 4 s more
    assert learnt_lag(9.9, 1.0, 1.0, 1.0, floor_s=3, cap_s=10) == 10  # less than the cap of event time: nothing learnt
    assert learnt_lag(30, 1.0, 1.0, 1.0, floor_s=12, cap_s=10) == 10  # a floor above the cap: the cap


def test_a_source_with_its_own_gone_lag_is_let_go_when_the_job_leads_it_by_that() -> None:
    now = T0 + timedelta(seconds=100)
    fresh = [(f"h{i}", "heartbeat", T0, T0 + timedelta(seconds=60), now) for i in range(3)]
    silent = [("h8", "heartbeat", T0, T0 + timedelta(seconds=55), now - timedelta(seconds=20)),
              ("h9", "heartbeat", T0, T0 + timedelta(seconds=55), now - timedelta(seconds=20))]
    c = clock_of("j", fresh + silent, now, idle_s=5, max_lag_s=120, gone_lag_s=10, gone={("h8", "heartbeat"): 4.0})
    assert not c.sources[("h8", "heartbeat")].alive  # led by 5 s, its own lag 4 s: gone
    assert c.sources[("h9", "heartbeat")].alive  # led by 5 s, the cap 10 s: waited for
    assert c.watermark == T0 + timedelta(seconds=55)
    c = clock_of("j", fresh + silent[:1], now, idle_s=5, max_lag_s=120, gone_lag_s=10, gone={("h8", "heartbeat"): 4.0})
    assert c.watermark == T0 + timedelta(seconds=60)


def _beats(job: str, host: str, times: list[datetime], ingested: list[datetime]) -> str:
    rows = ", ".join(f"('{job}-{host}-b{i}', '{job}', '{host}', {sql_time(t)}, 2.0, {sql_time(w)})"
                     for i, (t, w) in enumerate(zip(times, ingested, strict=True)))
    return f"INSERT INTO heartbeats (event_id, job_id, host, ts, interval_s, ingested_at) VALUES {rows}"


@pytest.mark.clickhouse
def test_the_gone_lag_is_learnt_from_the_sources_stored_delivery(clickhouse_dsn: str, database: str) -> None:
    """Heartbeats every 2 s for 40 s: "steady" ingested 1 s after each, "bursty" in 8-second bursts (2.5-8.5 s after),
    "new" for 4 s only, "late" 4 s after each (steadily, but later than the rest of the job); "steady" also steps
    every second, ingested 2 s after. Their learnt lags: gap + (slowest - the job's quickest) + margin: 2 + 0 + 2, the
    cap (2 + 7.5 + 2 > 10), the cap (too little to learn from), 2 + 3 + 2, and for the steps 1 + 1 + 2. Four hosts
    silent at once in a job of five: none is learnt from (the cap). The clock of a live job lets "steady" go 5 s
    behind the job and waits for "bursty"."""
    client = connect(clickhouse_dsn, database=database)
    times = [T0 + timedelta(seconds=2 * i) for i in range(21)]
    client.command(_beats("d", "steady", times, [t + timedelta(seconds=1) for t in times]))
    client.command(_beats("d", "bursty", times, [T0 + timedelta(seconds=8 * (i // 4 + 1) + 0.5) for i in range(21)]))
    client.command(_beats("d", "new", times[-3:], [t + timedelta(seconds=1) for t in times[-3:]]))
    client.command(_beats("d", "late", times, [t + timedelta(seconds=4) for t in times]))
    secs = [T0 + timedelta(seconds=i) for i in range(41)]
    client.command(steps_insert("d", "steady", secs, [t + timedelta(seconds=2) for t in secs]))
    last = times[-1]
    hosts = ("steady", "bursty", "new", "late")
    wanted = [("d", h, "heartbeat", last) for h in hosts] + [("d", "steady", "step", last)]
    lags = gone_lags(client, wanted, {"d": 4}, {"d": 500}, floor_s=3, cap_s=10)
    assert lags == {("d", "steady", "heartbeat"): 2 + MARGIN_S, ("d", "bursty", "heartbeat"): 10,
                    ("d", "new", "heartbeat"): 10, ("d", "late", "heartbeat"): 5 + MARGIN_S,
                    ("d", "steady", "step"): 2 + MARGIN_S}
    assert set(gone_lags(client, wanted, {"d": 4}, {"d": 5}, floor_s=3, cap_s=10).values()) == {10}  # correlated
    # job "e": "steady" and "bursty" as in "d"; "on" goes on beating, 5 s past them, 20 s (wall) after they went silent
    client.command(_beats("e", "steady", times, [t + timedelta(seconds=1) for t in times]))
    client.command(_beats("e", "bursty", times, [T0 + timedelta(seconds=8 * (i // 4 + 1) + 0.5) for i in range(21)]))
    frontier = last + timedelta(seconds=21)
    on = [T0 + timedelta(seconds=2 * i + 0.5) for i in range(23)] + [last + timedelta(seconds=5)]
    client.command(_beats("e", "on", on, [t + timedelta(seconds=1) for t in on[:-1]] + [frontier - timedelta(seconds=1)]))
    (clock,) = job_clocks(client, job="e", frontier=frontier, idle_s=5, gone_lag_s=10, gone_min_s=3)
    assert not clock.sources[("steady", "heartbeat")].alive and clock.sources[("bursty", "heartbeat")].alive
    (fixed,) = job_clocks(client, job="e", frontier=frontier, idle_s=5, gone_lag_s=10)  # no floor: the cap for all
    assert fixed.sources[("steady", "heartbeat")].alive
    # three steady hosts silent at once: among 150 others beating on, each is let go; among 1, none (correlated)
    for job, others in (("f", 150), ("g", 1)):
        for h in ("s1", "s2", "s3"):
            client.command(_beats(job, h, times, [t + timedelta(seconds=1) for t in times]))
        for i in range(others):
            client.command(_beats(job, f"on{i}", on, [t + timedelta(seconds=1) for t in on[:-1]] + [frontier]))
        (clock,) = job_clocks(client, job=job, frontier=frontier, idle_s=5, gone_lag_s=10, gone_min_s=3)
        assert {clock.sources[(h, "heartbeat")].alive for h in ("s1", "s2", "s3")} == {others == 1}, job


@pytest.mark.clickhouse
def test_the_step_read_selects_the_steps_of_its_window(clickhouse_dsn: str, database: str) -> None:
    """step_timings sorts by (job, step, ...): the read of a silent host's steps is bounded by the steps of its
    window (from job_step_runs), so it selects a few granules of a long job's, and none when the window holds no step
    of the job (a pause, a hang) while another job's steps go on in the same parts (no fallback to the whole job)."""
    client = connect(clickhouse_dsn, database=database)
    client.command(f"""INSERT INTO step_timings (event_id, job_id, host, rank, local_rank, world_size, dp, tp, pp,
                           step, ts, step_ms, failed, dropped)
        SELECT concat('s', toString(number)), 'long', concat('h', toString(intDiv(number % 64, 8))), number % 64,
               number % 8, 64, 0, 0, 0, intDiv(number, 64), {sql_time(T0)} + toIntervalSecond(intDiv(number, 64)), 1000, 0, 0
        FROM numbers({64 * 3 * 3600})""")
    client.command(f"""INSERT INTO step_timings (event_id, job_id, host, rank, local_rank, world_size, dp, tp, pp,
                           step, ts, step_ms, failed, dropped)
        SELECT concat('o', toString(number)), 'other', 'x', 0, 0, 1, 0, 0, 0, number,
               {sql_time(T0)} + toIntervalSecond(number), 1000, 0, 0 FROM numbers({4 * 3600})""")  # another job, an hour on
    client.command("OPTIMIZE TABLE step_timings FINAL")
    sql = delivery.read("step_timings")
    end = T0 + timedelta(hours=3)
    ((got, total),) = selected(client, sql, {"job": "long", "lo": ch_time(end - timedelta(seconds=35)),
                                             "hosts": ["h1"]}, ("step_timings",))
    assert total >= 60 and got <= 2, (got, total)  # of the job's ~85
    ((got, total),) = selected(client, sql, {"job": "long", "lo": ch_time(end + timedelta(minutes=5)),
                                             "hosts": ["h1"]}, ("step_timings",))
    assert got <= 1, (got, total)  # the engine may prune the part before the key: 0 of 0


def _job(job: str, steps: int, faults: list[str]) -> tuple[list[list[Event]], dict[int, datetime]]:
    sim = Simulation(SimConfig(job=job, layout=Layout(hosts=6, gpus_per_host=2), seed=3, start=T0,
                               faults=[parse_fault(f) for f in faults]))
    return [[sim.registration()], *(sim.step(i) for i in range(steps))], sim.step_starts


@pytest.mark.clickhouse
def test_a_lost_host_shipped_steadily_pages_within_ten_seconds_and_a_bursty_one_pages_nothing(
        clickhouse_dsn: str, database: str) -> None:
    """Two jobs fed at their pace (a step a second, as their agents ship). Job "gone": host 4 goes silent at step 52;
    its heartbeats are let go while the job leads them by less than 9 s (their own gone-lag, shipped steadily: the
    floor, 6 s; the fixed 10 s waited for 10) and its loss is paged before telemetry 12 s past the silence has
    arrived (~8 s here, ~10 s with the fixed gone-lag). Job "burst": host 2's telemetry comes in bursts of 8 steps (its agent batches);
    it is never paged. What live raised is what replay raises, for both."""
    gone, starts = _job("gone", 66, ["heartbeat_loss:host=sim-host-0004,start=52"])
    burst, _ = _job("burst", 66, [])
    client = connect(clickhouse_dsn, database=database)
    settings = AnalyzerSettings()
    cursor = LiveCursor(settings=settings, book=AlertBook(refresh_s=settings.refresh_s))
    live: list[Alert] = []
    paged_with: datetime | None = None
    let_go: float | None = None  # how far the job led the lost host's heartbeats when they were let go
    load(clickhouse_dsn, database, [e for b in gone[:12] + burst[:12] for e in b])
    caught_up(cursor, client, datetime.now(UTC))
    held: list[Event] = []  # burst's host 2: its events since its last burst
    for i, (g, b) in enumerate(zip(gone[12:], burst[12:], strict=True), start=11):
        t0 = time.monotonic()
        held += [e for e in b if e.host == "sim-host-0002"]
        now = [e for e in b if e.host != "sim-host-0002"]
        if i % 8 == 7:
            now, held = now + held, []
        load(clickhouse_dsn, database, g + now)
        got = caught_up(cursor, client, datetime.now(UTC))
        live += got
        if let_go is None:  # the lost host's heartbeats as the cursor's clock sees them now
            (clock,) = job_clocks(client, job="gone", frontier=datetime.now(UTC), idle_s=settings.watermark_idle_s,
                                  gone_lag_s=settings.watermark_gone_lag_s, gone_min_s=settings.watermark_gone_min_s)
            beats = clock.sources[("sim-host-0004", "heartbeat")]
            let_go = None if beats.alive else (clock.last_ts - beats.last_ts).total_seconds()
        if paged_with is None and any(a.fingerprint == "gone/heartbeat_loss/sim-host-0004" and a.status == "firing"
                                      for a in got):
            paged_with = max(e.ts for e in g)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
    load(clickhouse_dsn, database, held)
    live += caught_up(cursor, client, datetime.now(UTC) + timedelta(minutes=1))  # both have ended: judged to the end
    firing = {a.fingerprint for a in live if a.status == "firing"}
    assert firing == {"gone/heartbeat_loss/sim-host-0004"}, firing
    # let go at its own lag (the floor, 6 s, here: ~7 s when the clock was read), not the cap's 10 s (~11 s)
    assert let_go is not None and let_go < settings.watermark_gone_lag_s - 1, let_go
    assert paged_with is not None and (paged_with - starts[52]).total_seconds() < 12, (paged_with, starts[52])
    for job in ("gone", "burst"):
        expected = replay(client, settings, job)
        assert sorted((a.ts, a.fingerprint, a.status) for a in live if a.job_id == job) == \
            sorted((a.ts, a.fingerprint, a.status) for a in expected), job
