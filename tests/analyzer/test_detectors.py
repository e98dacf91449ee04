"""Each detector against crafted data in real ClickHouse: fires on its fault, quiet on healthy noise."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.crafted import T0, heartbeats, nic, steps
from tests.support.detectors import caught_up, load, run
from vigil.analyzer.alerts.book import AlertBook
from vigil.analyzer.engine import LiveCursor, evaluate, job_clocks
from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.analyzer.settings import AnalyzerSettings
from vigil.clickhouse.client import connect
from vigil.contract import Event, LogLine, ProcessExit

pytestmark = pytest.mark.clickhouse


def fingerprints(alerts: list[Any], status: str = "firing") -> set[str]:
    return {a.fingerprint for a in alerts if a.status == status}


def test_straggler_5pct_among_1024_hosts_is_named_with_phase_and_slowdown(clickhouse_dsn: str, database: str) -> None:
    load(clickhouse_dsn, database, steps("big", 1024, 40, gpus=4, slow={"h0777": 1.05}, slow_from=10, host_bias=0.005))
    client = connect(clickhouse_dsn, database=database)
    at = T0 + timedelta(seconds=41)
    alerts = evaluate(client, AnalyzerSettings(), AlertBook(), "big", at)
    assert fingerprints(alerts) == {"big/straggler/h0777/forward"}
    ev = alerts[0].evidence
    assert ev["host"] == "h0777" and ev["phase"] == "forward"
    assert 4.0 <= ev["slowdown_pct"] <= 6.0


def test_straggler_quiet_on_jitter_and_on_fleet_wide_slow_phase(clickhouse_dsn: str, database: str) -> None:
    # 3% per-sample jitter, 1% static host spread, and every 10th step 3x slower for everyone (a checkpoint)
    ckpt = {s: {"forward": 3.0, "backward": 3.0} for s in range(9, 60, 10)}
    load(clickhouse_dsn, database, steps("calm", 64, 60, jitter=0.03, host_bias=0.01, phase_factor=ckpt, seed=3))
    assert [a for a in run(clickhouse_dsn, database, "calm") if a.alert == "straggler"] == []


def test_straggler_within_30_steps_and_resolves_when_host_recovers(clickhouse_dsn: str, database: str) -> None:
    evs = steps("heal", 64, 90, slow={"h0005": 1.08}, slow_from=20, seed=5)
    evs = [e for e in evs if not (e.host == "h0005" and e.step >= 55)] + [
        e for e in steps("heal", 64, 90, seed=6) if e.host == "h0005" and e.step >= 55]  # type: ignore[attr-defined]
    load(clickhouse_dsn, database, evs)
    alerts = run(clickhouse_dsn, database, "heal")
    firing = [a for a in alerts if a.status == "firing"]
    assert {a.fingerprint for a in alerts} == {"heal/straggler/h0005/forward"}
    onset = T0 + timedelta(seconds=21)
    assert (firing[0].ts - onset).total_seconds() <= 30  # 1 s steps: within 30 steps
    assert alerts[-1].status == "resolved"


def test_traffic_drop_warns_and_stop_is_critical(clickhouse_dsn: str, database: str) -> None:
    evs: list[Event] = [*nic("net", 16, 300, level={("h0003", 150): 0.3, ("h0009", 200): 0.0}),
                        *heartbeats("net", 16, 300)]
    load(clickhouse_dsn, database, evs)
    alerts = run(clickhouse_dsn, database, "net")
    assert {a.fingerprint for a in alerts} == {"net/traffic_stall/h0003/mlx5_0", "net/traffic_stall/h0009/mlx5_0"}
    drop = next(a for a in alerts if a.subject == "h0003/mlx5_0")
    assert drop.severity == "warning" and drop.evidence["drop_pct"] >= 50
    stop = [a for a in alerts if a.subject == "h0009/mlx5_0" and a.severity == "critical"]
    assert stop, "zero traffic must escalate to critical"
    delay = (stop[0].ts - (T0 + timedelta(seconds=200))).total_seconds()
    assert 10 <= delay <= 15
    assert all(a.status == "firing" for a in alerts), "a lasting drop does not become the new normal"


def test_heartbeat_loss_fires_after_three_intervals_and_resolves(clickhouse_dsn: str, database: str) -> None:
    load(clickhouse_dsn, database, heartbeats("hb", 8, 120, silent={"h0002": (40, 70)}))
    alerts = run(clickhouse_dsn, database, "hb")
    assert [(a.fingerprint, a.status) for a in alerts] == [("hb/heartbeat_loss/h0002", "firing"),
                                                          ("hb/heartbeat_loss/h0002", "resolved")]
    assert alerts[0].first_seen == T0 + timedelta(seconds=38 + 6)  # last beat at 38 s + 3 x 2 s
    assert (alerts[0].ts - (T0 + timedelta(seconds=40))).total_seconds() <= 15


def test_heartbeat_quiet_when_whole_job_ends(clickhouse_dsn: str, database: str) -> None:
    load(clickhouse_dsn, database, heartbeats("end", 8, 60))
    client = connect(clickhouse_dsn, database=database)
    assert evaluate(client, AnalyzerSettings(), AlertBook(), "end", T0 + timedelta(seconds=58)) == []


def test_mfu_drift_names_the_grown_phase_and_ignores_a_straggler(clickhouse_dsn: str, database: str) -> None:
    decay = {s: {"forward": 1 + 0.5 * min(1.0, (s - 100) / 50)} for s in range(100, 200)}
    load(clickhouse_dsn, database, steps("mfu", 16, 200, phase_factor=decay, seed=7))
    alerts = run(clickhouse_dsn, database, "mfu")
    assert fingerprints(alerts) == {"mfu/mfu_drift/job"}
    first = next(a for a in alerts if a.status == "firing")
    assert first.evidence["phases"] == ["forward"] and first.evidence["drop_pct"] >= 5
    # one slow host drags the step time but no phase grows fleet-wide: straggler only
    load(clickhouse_dsn, database, steps("mfu2", 16, 200, slow={"h0001": 1.3}, slow_from=100, seed=8))
    assert {a.alert for a in run(clickhouse_dsn, database, "mfu2")} == {"straggler"}


def test_error_logs_aggregate_into_one_alert_and_exits_name_the_rank(clickhouse_dsn: str, database: str) -> None:
    lines = [LogLine(job_id="lg", host="h0001", rank=r, category="nccl", severity="error", ts=T0 + timedelta(seconds=10 + r),
                     message=f"NCCL error: unhandled system error (rank {r})") for r in range(8)]
    lines.append(LogLine(job_id="lg", host="h0001", category="nccl", severity="error", repeats=50,
                         ts=T0 + timedelta(seconds=20), message="flood summary"))
    lines.append(LogLine(job_id="lg", host="h0002", category="nccl_warn", severity="warning",
                         ts=T0 + timedelta(seconds=12), message="NCCL WARN benign"))
    exits = [ProcessExit(job_id="lg", host="h0003", rank=24, pid=7, exit_code=1, ts=T0 + timedelta(seconds=15),
                         summary="RuntimeError: CUDA error"),
             ProcessExit(job_id="lg", host="h0004", rank=32, pid=8, exit_code=0, ts=T0 + timedelta(seconds=15))]
    load(clickhouse_dsn, database, [*lines, *exits, *heartbeats("lg", 4, 40)])
    alerts = run(clickhouse_dsn, database, "lg")
    assert fingerprints(alerts) == {"lg/error_log/h0001/nccl", "lg/process_exit/h0003/rank24"}
    assert len([a for a in alerts if a.alert == "error_log" and a.status == "firing"]) == 1
    once = evaluate(connect(clickhouse_dsn, database=database), AnalyzerSettings(), AlertBook(), "lg",
                    T0 + timedelta(seconds=30))
    log_alert = next(a for a in once if a.alert == "error_log")
    assert log_alert.evidence["lines"] == 58 and log_alert.evidence["ranks"] == list(range(8))
    ex = next(a for a in alerts if a.alert == "process_exit")
    assert ex.severity == "critical" and "rank 24" in ex.summary and "exit code 1" in ex.summary


def test_exits_while_the_recovery_controller_pauses_the_job_are_not_failures(clickhouse_dsn: str, database: str) -> None:
    from vigil.contract import RecoveryAction

    def ex(host: str, rank: int, at: float, code: int = 1) -> ProcessExit:
        return ProcessExit(job_id="pz", host=host, rank=rank, pid=rank + 10, exit_code=code, ts=T0 + timedelta(seconds=at),
                           summary="RuntimeError: CUDA error" if rank == 3 else "terminated")

    def pause(at: float, status: str) -> RecoveryAction:
        return RecoveryAction(job_id="pz", host="controller", action="pause", target="pz", status=status,  # type: ignore[arg-type]
                              ts=T0 + timedelta(seconds=at), reason="pause before the restart")

    def line(host: str, rank: int | None, at: float, category: str) -> LogLine:
        return LogLine(job_id="pz", host=host, rank=rank, category=category, severity="error", message=category,
                       ts=T0 + timedelta(seconds=at), source="kernel" if category == "xid" else "process")

    # rank 3 crashes at 10 s; the controller pauses the job 12-15 s (its ranks 0-2 stop at 13-14 s, printing their
    # SIGTERM tracebacks; an Xid is logged meanwhile); later, after the pause and its grace, rank 1 fails on its own
    load(clickhouse_dsn, database, [ex("h0001", 3, 10), line("h0001", 3, 9.5, "cuda_error"), pause(12, "started"),
                                    ex("h0000", 0, 13), ex("h0000", 1, 13.5), line("h0000", 0, 13, "signal"),
                                    line("h0000", 1, 13.2, "collective_timeout"), line("h0001", None, 13.4, "xid"),
                                    ex("h0001", 2, 14), pause(15, "succeeded"), ex("h0000", 1, 60),
                                    line("h0000", 1, 59.8, "signal"), *heartbeats("pz", 2, 70)])
    got = evaluate(connect(clickhouse_dsn, database=database), AnalyzerSettings(), AlertBook(), "pz",
                   T0 + timedelta(seconds=62))
    assert {a.fingerprint for a in got if a.alert == "process_exit"} == {"pz/process_exit/h0001/rank3",
                                                                         "pz/process_exit/h0000/rank1"}
    assert next(a for a in got if a.fingerprint == "pz/process_exit/h0000/rank1").evidence["exit_ts"].endswith("01:00+00:00")
    logs = {a.fingerprint: a for a in got if a.alert == "error_log"}
    assert set(logs) == {"pz/error_log/h0001/cuda_error", "pz/error_log/h0001/xid", "pz/error_log/h0000/signal"}
    assert logs["pz/error_log/h0000/signal"].evidence["lines"] == 1  # rank 1's own failure; not rank 0's SIGTERM


def _ddp_steps(job: str, n_steps: int, slow_rank: int | None, slow_from: int, seed: int) -> list[Event]:
    """2 hosts x 2 ranks of data parallelism: a slow rank's forward makes the others wait in backward.

    A step every 0.5 s of event time: the straggler detector is judged every 8 s, so the job runs past several
    of its instants (at 0.1 s a step the whole job fitted between two)."""
    import random

    from vigil.contract import StepTiming

    rng = random.Random(seed)
    out: list[Event] = []
    for s in range(n_steps):
        extra = 40.0 if slow_rank is not None and s >= slow_from else 0.0
        for rank in range(4):
            fwd = 35.0 * (1 + rng.gauss(0, 0.03)) + (extra if rank == slow_rank else 0.0)
            bwd = 60.0 * (1 + rng.gauss(0, 0.03)) + (0.0 if rank == slow_rank else extra)  # all-reduce wait
            phases = {"forward": fwd, "backward": bwd, "optimizer": 5.0 * (1 + rng.gauss(0, 0.03))}
            out.append(StepTiming(job_id=job, host=f"h{rank // 2:04d}", rank=rank, local_rank=rank % 2, world_size=4,
                                  step=s, step_ms=sum(phases.values()), phases=phases,
                                  ts=T0 + timedelta(seconds=(s + 1) * 0.5)))
    return out


def test_small_job_compares_ranks_and_blames_the_slow_ranks_host(clickhouse_dsn: str, database: str) -> None:
    load(clickhouse_dsn, database, _ddp_steps("ddp2", 60, slow_rank=3, slow_from=20, seed=1))
    alerts = [a for a in run(clickhouse_dsn, database, "ddp2") if a.alert == "straggler"]
    assert {a.fingerprint for a in alerts} == {"ddp2/straggler/h0001/forward"}
    ev = alerts[0].evidence
    assert ev["rank"] == 3 and ev["compared"] == "ranks" and ev["slowdown_pct"] > 50


def test_small_healthy_job_raises_no_straggler(clickhouse_dsn: str, database: str) -> None:
    load(clickhouse_dsn, database, _ddp_steps("ddp2ok", 60, slow_rank=None, slow_from=0, seed=2))
    assert [a for a in run(clickhouse_dsn, database, "ddp2ok") if a.alert == "straggler"] == []


def test_pipeline_stages_are_peers_even_before_the_job_registration_arrives(clickhouse_dsn: str, database: str) -> None:
    """The last pipeline stage is legitimately slower; without a JobRegistered event yet it must not page."""
    import random

    from vigil.contract import ParallelCoords, StepTiming

    rng = random.Random(4)
    events: list[Event] = []
    for s in range(40):
        for h in range(16):
            stage = h // 4
            for g in range(2):
                factor = 1.06 if stage == 3 else 1.0
                phases = {p: base * factor * (1 + rng.gauss(0, 0.01)) for p, base in (("forward", 300.0), ("backward", 500.0))}
                events.append(StepTiming(job_id="pp4", host=f"h{h:04d}", rank=h * 2 + g, local_rank=g, world_size=32,
                                         coords=ParallelCoords(tp=g, pp=stage, dp=h % 4), step=s,
                                         step_ms=sum(phases.values()), phases=phases, ts=T0 + timedelta(seconds=s + 1)))
    load(clickhouse_dsn, database, events)
    assert [a.fingerprint for a in run(clickhouse_dsn, database, "pp4") if a.alert == "straggler"] == []


def test_heartbeats_first_stored_after_the_turn_read_its_clock_are_arriving_not_lost(clickhouse_dsn: str,
                                                                                     database: str) -> None:
    """The ingest writes while a turn judges: hosts whose first heartbeats land between the turn reading the job's
    clock and the heartbeat query are members the clock does not know yet. They are arriving (late delivery, one
    partition behind the other), not silent: none is paged, although one's newest stored heartbeat is old at `at`."""
    from vigil.analyzer.detect.base import EvalContext
    from vigil.analyzer.detect.heartbeat import HeartbeatDetector

    hbs = heartbeats("race", 8, 40)
    load(clickhouse_dsn, database, [*steps("race", 8, 40), *(h for h in hbs if h.host < "h0004")])
    client = connect(clickhouse_dsn, database=database)
    [clock] = job_clocks(client, job="race", frontier=datetime.now(UTC), idle_s=60)  # the turn reads the clock ...
    assert ("h0004", "heartbeat") not in clock.sources and clock.sources[("h0000", "heartbeat")].alive
    behind = T0 + timedelta(seconds=28)  # ... then the other partition's first burst is stored, h0004's ends earlier
    load(clickhouse_dsn, database, [h for h in hbs if h.host >= "h0004" and (h.host != "h0004" or h.ts <= behind)])
    at = T0 + timedelta(seconds=38)
    ctx = EvalContext(client=client, settings=AnalyzerSettings(), job="race", at=at, live=True, sources=clock.sources)
    assert HeartbeatDetector().detect(ctx) == []
    # replay, and the next turn once h0004 has gone idle, judge what is stored: then it is lost
    replayed = EvalContext(client=client, settings=AnalyzerSettings(), job="race", at=at)
    assert [f.subject for f in HeartbeatDetector().detect(replayed)] == ["h0004"]


def test_live_clock_waits_for_hosts_still_being_ingested(clickhouse_dsn: str, database: str) -> None:
    """Hosts sit on different partitions: while some lag, the live cursor must not judge past them."""
    evs = steps("lag", 8, 40)
    load(clickhouse_dsn, database, [e for e in evs if e.host >= "h0004" and e.step < 10])  # behind
    load(clickhouse_dsn, database, [e for e in evs if e.host < "h0004"])
    client = connect(clickhouse_dsn, database=database)
    now = datetime.now(UTC)
    [clock] = job_clocks(client, job="lag", frontier=now, idle_s=60)
    assert (clock.last_ts, clock.watermark, clock.stopped) == (T0 + timedelta(seconds=40), T0 + timedelta(seconds=10),
                                                               False)
    cursor = LiveCursor(settings=AnalyzerSettings(watermark_idle_s=60), book=AlertBook())
    caught_up(cursor, client, now)
    assert cursor.positions["lag"] == T0 + timedelta(seconds=10)
    bounded = LiveCursor(settings=AnalyzerSettings(watermark_idle_s=60, watermark_max_lag_s=6), book=AlertBook())
    caught_up(bounded, client, now)
    assert bounded.positions["lag"] == T0 + timedelta(seconds=34)  # never more than 6 s behind the newest
    # sources with nothing ingested for watermark_idle_s before the ingest frontier (dead agents) stop holding
    # it back; when none still arrives the job has stopped and its clock runs to its newest event
    [idle] = job_clocks(client, job="lag", frontier=now + timedelta(seconds=61), idle_s=60)
    assert (idle.watermark, idle.stopped) == (T0 + timedelta(seconds=40), True)


def test_writer_completes_an_event_cut_off_between_its_tables(clickhouse_dsn: str, database: str) -> None:
    """A heartbeat is a `heartbeats` row and `gpu_stats` rows: a crash after the first insert must not
    make the retry skip the second table."""
    from vigil.analyzer.ingest.processors import process
    from vigil.contract import GpuState, Heartbeat

    hb = Heartbeat(job_id="cut", host="h0", ts=T0, gpus=[GpuState(index=i, util_pct=90.0) for i in range(4)])
    w = ClickHouseWriter(client=connect(clickhouse_dsn, database=database))
    w.write_rows([tr for tr in process(hb) if tr[0] == "heartbeats"])  # the crash: only the first table landed
    assert w.write([hb]) == []
    client = connect(clickhouse_dsn, database=database)
    count = lambda t: int(client.query(f"SELECT count() FROM {t} WHERE job_id = 'cut'").result_rows[0][0])  # noqa: E731
    assert (count("heartbeats"), count("gpu_stats")) == (1, 4)
    assert w.write([hb]) == [] and (count("heartbeats"), count("gpu_stats")) == (1, 4)


def test_the_alert_says_the_source_and_the_catalog_action(clickhouse_dsn: str, database: str) -> None:
    """Kernel Xids quote the catalog (31: restart the job, no host fault; 79: reboot, a host fault); the same
    Xid 79 printed by a training process is a claim: its own alert, a warning, never a host fault (issue 49)."""
    from vigil.contract.xid import xid_entry

    def kernel(host: str, code: int, at: float, gpu: int) -> LogLine:
        e = xid_entry(code)
        return LogLine(job_id="src", host=host, rank=gpu, category="xid", severity=e.severity, xid=code, ts=T0 +
                       timedelta(seconds=at), source="kernel", action=e.action, gpu_index=gpu,
                       message=f"NVRM: Xid (PCI:0000:3b:00): {code}, pid=1, name=python")

    printed = LogLine(job_id="src", host="h0002", rank=0, category="xid", severity="critical", xid=79,
                      ts=T0 + timedelta(seconds=5), message="NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.")
    load(clickhouse_dsn, database, [kernel("h0000", 31, 5, 2), kernel("h0001", 79, 5, 1), kernel("h0001", 92, 6, 1),
                                    printed, *heartbeats("src", 3, 20)])
    got = evaluate(connect(clickhouse_dsn, database=database), AnalyzerSettings(log={"min_severity": "warning"}),
                   AlertBook(), "src", T0 + timedelta(seconds=10))
    logs = {a.fingerprint: a for a in got if a.alert == "error_log"}
    assert set(logs) == {"src/error_log/h0000/xid", "src/error_log/h0001/xid", "src/error_log/h0002/xid/claim"}
    app, gone, claim = (logs[f"src/error_log/{h}"] for h in ("h0000/xid", "h0001/xid", "h0002/xid/claim"))
    assert (app.severity, app.evidence["source"], app.evidence["action"], app.evidence["host_fault"],
            app.evidence["gpus"]) == ("error", "kernel", "restart_job", False, [2])
    assert "source kernel, catalog action restart_job" in app.summary
    assert (gone.severity, gone.evidence["action"], gone.evidence["host_fault"]) == ("critical", "reboot_then_check",
                                                                                     True)
    assert (claim.severity, claim.evidence["source"], claim.evidence["action"], claim.evidence["host_fault"]) == (
        "warning", "process", None, False)
    assert "not a kernel fact" in claim.summary


def test_a_hardware_warning_is_its_own_alert_by_default_a_process_warning_is_not(clickhouse_dsn: str,
                                                                                  database: str) -> None:
    """Symbol errors growing on an InfiniBand port (sysfs, a warning: the catalog's watch) alert by default, as
    `<host>/ib_symbol_errors` (`log.hardware_min_severity` warning); a training process's warning line does not
    (`log.min_severity` error); with hardware_min_severity error the port's warning is silent too (issue 49)."""
    from vigil.contract.xid import XidAction

    port = LogLine(job_id="hw", host="h0000", category="ib_symbol_errors", severity="warning", source="sysfs",
                   action=XidAction.WATCH, ts=T0 + timedelta(seconds=5),
                   message="mlx5_0 port 1: symbol_error +7 (now 7) (state ACTIVE, phys_state LinkUp)")
    printed = LogLine(job_id="hw", host="h0001", rank=1, category="nccl_warn", severity="warning",
                      ts=T0 + timedelta(seconds=5), message="NCCL WARN NET/IB : Got async event : port error")
    load(clickhouse_dsn, database, [port, printed, *heartbeats("hw", 3, 20)])
    client = connect(clickhouse_dsn, database=database)
    got = evaluate(client, AnalyzerSettings(), AlertBook(), "hw", T0 + timedelta(seconds=10))
    logs = {a.fingerprint: a for a in got if a.alert == "error_log"}
    assert list(logs) == ["hw/error_log/h0000/ib_symbol_errors"]
    (alert,) = logs.values()
    assert (alert.severity, alert.evidence["source"], alert.evidence["action"], alert.evidence["host_fault"]) == (
        "warning", "sysfs", "watch", False)
    quiet = evaluate(client, AnalyzerSettings(log={"hardware_min_severity": "error"}), AlertBook(), "hw",
                     T0 + timedelta(seconds=10))
    assert [a for a in quiet if a.alert == "error_log"] == []
