"""The physics of synchronous training, each case on crafted data in real ClickHouse.

Waiting is not slowness (kinds, nested waits, pipeline structure), per-GPU stragglers with
their GPU evidence, intermittent slowness, flapping links, a NIC held to its peers at the same
instant, and a quiet job as one signal.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest

from tests.support.crafted import T0, gpu_heartbeats, heartbeats, nic, sync_steps
from vigil.analyzer.engine import replay
from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.analyzer.settings import AnalyzerSettings
from vigil.clickhouse.client import connect
from vigil.contract import Event, JobRegistered, NicCounters

pytestmark = pytest.mark.clickhouse


def run(dsn: str, db: str, job: str, events: list[Any], **overrides: Any) -> list[Any]:
    client = connect(dsn, database=db)
    w = ClickHouseWriter(client=client)
    for i in range(0, len(events), 50_000):
        w.write(events[i:i + 50_000])
    return replay(client, AnalyzerSettings(**overrides), job)


def severe(alerts: list[Any]) -> set[str]:
    return {a.fingerprint for a in alerts if a.status == "firing" and a.severity != "info"}


def named(alerts: list[Any]) -> set[tuple[str, str]]:
    """(alert, host) of what pages."""
    return {(a.alert, a.host) for a in alerts if a.status == "firing" and a.severity != "info"}


def test_ranks_waiting_for_a_slow_peer_are_not_stragglers(clickhouse_dsn: str, database: str) -> None:
    """pp=4: the slow host's pipeline partners wait for it in `bubble`, everyone else in `grad_sync`.
    Judged on compute only, the slow host alone is named, with the waiting it causes."""
    evs = sync_steps("wait", 32, 60, gpus=2, pp=4, slow_host={"h0009": 1.12}, slow_from=10)
    alerts = run(clickhouse_dsn, database, "wait", evs)
    assert severe(alerts) == {"wait/straggler/h0009/backward"}
    ev = next(a for a in alerts if a.status == "firing").evidence
    assert set(ev["phases"]) == {"forward", "backward", "optimizer"} and ev["peer_group"] == "1"
    assert 60 <= ev["others_wait_ms"] <= 130  # 12% of ~800 ms compute
    # the same steps with `bubble` declared compute: the waiting partners (same pipeline) are blamed
    as_compute = [e.model_copy(update={"job_id": "wait2", "phase_kinds": {"bubble": "compute"}}) for e in evs]
    blamed = {a.host for a in run(clickhouse_dsn, database, "wait2", as_compute) if a.status == "firing"}
    assert blamed - {"h0009"} and blamed <= {"h0009", "h0001", "h0017", "h0025"}, blamed  # its partners, stages 0, 2, 3


def test_declared_kinds_from_steps_or_registration_and_nested_waits(clickhouse_dsn: str, database: str) -> None:
    # a waiting phase whose name says nothing: declared by the steps ...
    evs = sync_steps("decl", 32, 60, gpus=2, pp=4, slow_host={"h0010": 1.06}, slow_from=10, comm="dp_exchange",
                     declare={"dp_exchange": "comm"})
    renamed = [e.model_copy(update={"phases": {("stage_handoff" if k == "bubble" else k): v for k, v in e.phases.items()},
                                    "phase_kinds": {**e.phase_kinds, "stage_handoff": "wait"}}) for e in evs]
    # (h0010 is 6 % slower in every compute phase: whichever cost the most names the alert)
    assert named(run(clickhouse_dsn, database, "decl", renamed)) == {("straggler", "h0010")}
    # ... or by the job's registration
    reg = JobRegistered(job_id="decl2", host="h0000", world_size=64, dp=16, pp=4, phase_kinds={"stage_handoff": "wait"},
                        ts=T0)
    by_job: list[Event] = [reg, *(e.model_copy(update={"job_id": "decl2", "phase_kinds": {"dp_exchange": "comm"}})
                                  for e in renamed)]
    assert named(run(clickhouse_dsn, database, "decl2", by_job)) == {("straggler", "h0010")}
    # undeclared, the handoff wait is taken for work and the slow host's partners are blamed too
    undeclared = [e.model_copy(update={"job_id": "decl3", "phase_kinds": {}}) for e in renamed]
    assert len(severe(run(clickhouse_dsn, database, "decl3", undeclared))) > 1
    # the all-reduce nested in backward (DDP style): subtracted, so the slow host's own backward shows
    nested = sync_steps("nest", 16, 60, gpus=2, slow_host={"h0004": 1.08}, slow_from=10, nested_wait=True)
    alerts = run(clickhouse_dsn, database, "nest", nested)
    assert severe(alerts) == {"nest/straggler/h0004/backward"}


def test_pipeline_structure_never_alerts(clickhouse_dsn: str, database: str) -> None:
    """First stage +4% forward (embedding), last stage +6% (head, loss), bubbles everywhere else."""
    evs = sync_steps("pipe", 16, 80, gpus=2, pp=4, seed=3)
    assert severe(run(clickhouse_dsn, database, "pipe", [*evs, *gpu_heartbeats("pipe", 16, 80, gpus=2)])) == set()


def test_one_slow_gpu_of_eight_is_named_by_rank_and_gpu(clickhouse_dsn: str, database: str) -> None:
    """Each GPU its own data-parallel rank: the slow one stands out among its host's ranks."""
    evs: list[Event] = [*sync_steps("gpu", 16, 60, tp_coupled=False, slow_gpu={("h0005", 3): 1.08}, slow_from=10),
                        *gpu_heartbeats("gpu", 16, 62, throttled={("h0005", 3): "HW_SLOWDOWN"})]
    alerts = run(clickhouse_dsn, database, "gpu", evs)
    assert severe(alerts) == {"gpu/straggler/h0005/gpu3"}
    a = next(a for a in alerts if a.status == "firing")
    assert a.host == "h0005" and (a.evidence["rank"], a.evidence["gpu"]) == (43, 3)
    readings = a.evidence["gpu_readings"]
    assert readings["throttle_reasons"] == ["HW_SLOWDOWN"] and readings["sm_clock_mhz"] == 1830.0
    assert readings["temp_c"] == 89.0 and readings["power_w"] == 540.0
    assert 5 <= a.evidence["slowdown_pct"] <= 11


def test_a_host_that_becomes_5_percent_slower_is_found_despite_the_speed_lottery(clickhouse_dsn: str,
                                                                                   database: str) -> None:
    """Hosts differ by ~1.5 % for good (silicon, clocks): against its stage peers alone a 5 % slowdown is within
    ~3 spreads and hides; against its own usual level (its ratio to its stage over earlier windows) it shows at
    once. The healthy hosts' lottery pages no one."""
    evs = sync_steps("lottery", 48, 140, gpus=2, pp=4, host_bias=0.015, seed=11, slow_host={"h0030": 1.05},
                     slow_from=70)
    alerts = run(clickhouse_dsn, database, "lottery", evs)
    assert named(alerts) == {("straggler", "h0030")}
    first = min(a.first_seen for a in alerts if a.status == "firing" and a.severity != "info")
    assert first <= T0 + timedelta(seconds=70 + 30), first  # within 30 steps of the onset (1 step/s)


def test_gc_spikes_on_one_rank_step_in_a_hundred_page_no_one_at_512_gpus(clickhouse_dsn: str, database: str) -> None:
    """Heavy tail: 1 % of rank-steps 20-60 % slower (GC, page faults). At 512 GPUs one lands in some rank's
    5-step window every window; a window's mean without its slowest sample does not move, so only the slow GPU
    (8 %, with spikes of its own) is named."""
    evs: list[Event] = [*sync_steps("spiky", 64, 90, tp_coupled=False, spikes=0.01, seed=5,
                                    slow_gpu={("h0021", 2): 1.08}, slow_from=30),
                        *gpu_heartbeats("spiky", 64, 92)]
    assert severe(run(clickhouse_dsn, database, "spiky", evs)) == {"spiky/straggler/h0021/gpu2"}


def test_pauses_that_stall_a_whole_tensor_parallel_host_in_3_of_5_windows_page_no_one(
        clickhouse_dsn: str, database: str) -> None:
    """One rank's GC pause stalls its TP group: all 8 of the host's samples of that step are +200 ms. A host
    with such a step in three consecutive windows (at 512 hosts this comes by chance about once an hour) is
    not slow: the window drops its slowest step, not just its slowest sample (7 of the 8 would stay: +7 %)."""
    evs = sync_steps("paused", 16, 100, seed=3, pauses={"h0005": [52, 57, 62], "h0011": [71, 78, 81, 86]})
    assert severe(run(clickhouse_dsn, database, "paused", evs)) == set()
    slow = sync_steps("paused-slow", 16, 100, seed=3, slow_host={"h0005": 1.05}, slow_from=40,
                      pauses={"h0005": [52, 57, 62]})  # a slow host with pauses of its own is still found
    assert severe(run(clickhouse_dsn, database, "paused-slow", slow)) == {"paused-slow/straggler/h0005/backward"}


def test_a_tensor_parallel_host_waits_for_its_throttled_gpu_and_a_slow_host_is_named_as_the_host(
        clickhouse_dsn: str, database: str) -> None:
    evs: list[Event] = [
        *sync_steps("tp", 16, 60, slow_gpu={("h0005", 6): 1.12}, slow_host={"h0011": 1.06}, slow_from=10),
        *gpu_heartbeats("tp", 16, 62, throttled={("h0005", 6): "hw_thermal_slowdown"})]
    alerts = run(clickhouse_dsn, database, "tp", evs)
    assert severe(alerts) == {"tp/straggler/h0005/gpu6", "tp/straggler/h0011/backward"}
    gpu = next(a for a in alerts if a.subject == "h0005/gpu6")
    assert gpu.evidence["gpu"] == 6 and "hw_thermal_slowdown" in gpu.summary
    host = next(a for a in alerts if a.subject == "h0011/backward")
    assert host.evidence["slow_gpus"] == [] and host.evidence["gpus_checked"] == 8


def test_a_host_slow_on_a_fraction_of_its_steps_is_found(clickhouse_dsn: str, database: str) -> None:
    evs = sync_steps("inter", 16, 100, gpus=2, intermittent=("h0003", 0.25, 1.2), slow_from=10, seed=2)
    alerts = run(clickhouse_dsn, database, "inter", evs)
    assert severe(alerts) == {"inter/straggler/h0003/backward"}


def test_small_job_pair_is_judged_by_the_waiting_it_causes(clickhouse_dsn: str, database: str) -> None:
    slow = sync_steps("pair", 2, 60, gpus=1, slow_host={"h0001": 1.3}, slow_from=10, step_s=0.2)
    alerts = run(clickhouse_dsn, database, "pair", slow)
    assert severe(alerts) == {"pair/straggler/h0001/backward"}
    assert next(a for a in alerts if a.status == "firing").evidence["others_wait_ms"] > 100
    healthy = sync_steps("pair-ok", 2, 60, gpus=1, step_s=0.2, seed=4, jitter=0.04)
    assert severe(run(clickhouse_dsn, database, "pair-ok", healthy)) == set()


def _nics(job: str, hosts: int, seconds: int, level: Any) -> list[Event]:
    """`nic()` samples with each (host, second)'s level from `level(host, t)`."""
    out: list[Event] = []
    for e in nic(job, hosts, seconds):
        f = level(e.host, int((e.ts - T0).total_seconds()))
        out.append(e if f == 1.0 else e.model_copy(update={"tx_bps": e.tx_bps * f, "rx_bps": e.rx_bps * f}))
    return out


@pytest.mark.parametrize("others, bursts", [(0.3, False), (0.05, False), (0.3, True)],
                         ids=["others-at-30pct", "others-stall-to-5pct", "bursty-job"])
def test_a_flapping_nic_is_one_alert_with_its_count_and_period(clickhouse_dsn: str, database: str, others: float,
                                                               bursts: bool) -> None:
    """Down 3 s every 20 s; the job's collectives stall meanwhile (other NICs at 30 %, or almost stopped at 5 %).
    `bursts`: the job's traffic comes 2 s in every 8, at 5 % in between. Neither a stall nor the quiet between
    bursts may hide the flap (a pause's edge is skipped, a quiet bucket is judged against its own median)."""
    def level(host: str, t: int) -> float:
        base = 1.0 if not bursts or t % 8 < 2 else 0.05
        if t >= 100 and (t - 100) % 20 < 3:
            return 0.0 if host == "h0004" else base * others
        return base

    alerts = run(clickhouse_dsn, database, "flap", [*_nics("flap", 16, 300, level), *heartbeats("flap", 16, 300)])
    mine = {a.fingerprint for a in alerts if a.status == "firing" and a.subject.startswith("h0004/")}
    assert (mine if bursts else severe(alerts)) == {"flap/traffic_stall/h0004/mlx5_0"}
    first = next(a for a in alerts if a.status == "firing" and a.subject == "h0004/mlx5_0")
    assert first.evidence["pattern"] == "flap" and first.evidence["flaps"] >= 3 and first.evidence["period_s"] == pytest.approx(20, abs=2)
    assert first.evidence["down_s"] == pytest.approx(3, abs=1)
    assert (first.ts - (T0 + timedelta(seconds=100))).total_seconds() <= 60


def test_a_checkpoint_edge_is_no_flap_and_a_healed_drop_resolves(clickhouse_dsn: str, database: str) -> None:
    """Each host samples at its own phase of the second; a 1.3 s checkpoint (every NIC quiet) ends 0.1 s into a
    2 s bucket, so two samples of that bucket are quiet: too few to mark it, and h0001's lone quiet sample looked
    like a flap. One flap keeps a firing NIC alert, so h0001's drop (40-100 s) fired on for 180 s after the
    checkpoint. A low sample next to a bucket where more than a tenth of the NICs were far quieter is not counted
    down (a pause's edge): no flap, and the drop resolves."""
    hosts, seconds = 16, 200
    quiet_from, quiet_to = T0 + timedelta(seconds=90.8), T0 + timedelta(seconds=92.1)
    out: list[Event] = []
    for e in nic("edge", hosts, seconds):
        h = int(e.host[1:])
        ts = e.ts + timedelta(seconds=h / hosts)  # h0000 at .0000, h0001 at .0625, ...
        f = 0.005 if quiet_from <= ts < quiet_to else 0.3 if h == 1 and 40 <= (ts - T0).total_seconds() < 100 else 1.0
        out.append(e.model_copy(update={"ts": ts, "tx_bps": e.tx_bps * f, "rx_bps": e.rx_bps * f}))
    alerts = run(clickhouse_dsn, database, "edge", [*out, *heartbeats("edge", hosts, seconds)])
    mine = [(a.status, a.evidence.get("pattern")) for a in alerts if a.subject == "h0001/mlx5_0"]
    assert mine and mine[0] == ("firing", None) and mine[-1][0] == "resolved", mine
    assert severe(alerts) == {"edge/traffic_stall/h0001/mlx5_0"}
    assert not [a for a in alerts if a.evidence.get("pattern") == "flap"]


def _beating(job: str, hosts: int, seconds: int, level: Any) -> list[Event]:
    """1 Hz NIC samples of a job whose traffic peaks once per ~0.51 s step, each host's agent sampling at its own
    phase of the step: a host's samples sweep slowly through the step, a 20 s beat of +-45 %, every host at its
    own point of it (as the simulator's 0.5 s-step jobs look). `level(host, t)` scales a host's traffic."""
    out: list[Event] = []
    for t in range(seconds):
        for h in range(hosts):
            host = f"h{h:04d}"
            bps = 1e10 * (1 + 0.45 * math.sin(2 * math.pi * (t / 20 + h / hosts))) * level(host, t)
            out.append(NicCounters(job_id=job, host=host, device="mlx5_0", link="rdma", tx_bytes=0, rx_bytes=0,
                                   tx_bps=bps / 2, rx_bps=bps / 2, interval_s=1.0, ts=T0 + timedelta(seconds=t)))
    return out


def test_a_nic_low_against_its_own_short_history_but_level_with_its_peers_is_not_a_culprit(
        clickhouse_dsn: str, database: str) -> None:
    """Early in a run a NIC's baseline is a few seconds of history: one that caught its host's beat at the peak
    reads the trough 10 s later as a 50 % drop, though it moves as much as its peers (today's detector warned on
    h0001). Held to the job's other NICs over the same window as well, only the real faults are named: a NIC
    down to 35 % (the beat on top of that) and a stopped one (critical)."""
    def level(host: str, t: int) -> float:
        return 0.35 if host == "h0005" and t >= 40 else 0.0 if host == "h0002" and t >= 50 else 1.0

    alerts = run(clickhouse_dsn, database, "beat", [*_beating("beat", 8, 90, level), *heartbeats("beat", 8, 90)])
    assert severe(alerts) == {"beat/traffic_stall/h0005/mlx5_0", "beat/traffic_stall/h0002/mlx5_0"}
    drop = next(a for a in alerts if a.subject == "h0005/mlx5_0")
    assert drop.severity == "warning" and drop.evidence["peer_drop_pct"] >= 50
    assert (drop.ts - (T0 + timedelta(seconds=40))).total_seconds() <= 15
    assert any(a.subject == "h0002/mlx5_0" and a.severity == "critical" for a in alerts)


def test_a_nic_that_always_moves_more_than_its_peers_is_held_to_its_own_share(clickhouse_dsn: str,
                                                                           database: str) -> None:
    """Hosts 0-3 (a pipeline stage that moves more) carry twice the traffic of hosts 4-7. h0001 loses 60 %: still
    above the job's mean NIC, but 60 % below what it moves next to its peers -> named; nobody else."""
    def level(host: str, t: int) -> float:
        base = 2.0 if int(host[1:]) < 4 else 1.0
        return base * (0.4 if host == "h0001" and t >= 200 else 1.0)

    alerts = run(clickhouse_dsn, database, "stage", [*_nics("stage", 8, 300, level), *heartbeats("stage", 8, 300)])
    assert severe(alerts) == {"stage/traffic_stall/h0001/mlx5_0"}
    drop = next(a for a in alerts if a.subject == "h0001/mlx5_0")
    assert drop.evidence["peer_drop_pct"] >= 50 and (drop.ts - (T0 + timedelta(seconds=200))).total_seconds() <= 15
    # held while its baseline still remembers its level (about a minute here; a lasting drop of a NIC that usually
    # moves more than the fleet median is then measured against that median: a known limit)
    ends = [a.ts for a in alerts if a.subject == "h0001/mlx5_0" and a.status == "resolved"]
    assert not ends or (ends[0] - drop.ts).total_seconds() >= 60, ends


def test_a_quiet_job_is_one_event_and_no_baseline_learns_the_pause(clickhouse_dsn: str, database: str) -> None:
    """An evaluation: every NIC at 0.5% for 60 s (low, not zero). Then one NIC loses 60%: still a drop."""
    def level(host: str, t: int) -> float:
        if 150 <= t < 210:
            return 0.005
        return 0.4 if host == "h0003" and t >= 215 else 1.0

    alerts = run(clickhouse_dsn, database, "eval", [*_nics("eval", 16, 300, level), *heartbeats("eval", 16, 300)])
    job = [a for a in alerts if a.subject == "job"]
    assert [(a.status, a.severity) for a in job] == [("firing", "info"), ("resolved", "info")]
    assert "paused" in job[0].evidence["state"] and job[0].evidence["traffic_level"] < 0.02
    assert severe(alerts) == {"eval/traffic_stall/h0003/mlx5_0"}
    drop = next(a for a in alerts if a.subject == "h0003/mlx5_0")
    assert drop.evidence["drop_pct"] >= 50 and (drop.ts - (T0 + timedelta(seconds=215))).total_seconds() <= 15


def test_the_host_that_went_quiet_first_is_named_the_suspect(clickhouse_dsn: str, database: str) -> None:
    def level(host: str, t: int) -> float:
        if host == "h0006" and t >= 150:
            return 0.0
        return 0.004 if t >= 154 else 1.0

    alerts = run(clickhouse_dsn, database, "hang", [*_nics("hang", 16, 240, level), *heartbeats("hang", 16, 240)])
    assert severe(alerts) == {"hang/traffic_stall/job"}
    a = next(a for a in alerts if a.severity == "warning")
    assert a.host == "h0006" and a.evidence["suspect"] == "h0006" and a.evidence["suspect_lead_s"] >= 3


def test_nic_samples_at_exactly_zero_during_a_pause_are_a_pause_too(clickhouse_dsn: str, database: str) -> None:
    paused = [e.model_copy(update={"tx_bps": 0.0, "rx_bps": 0.0}) if 150 <= (e.ts - T0).total_seconds() < 175 else e
              for e in nic("pause", 16, 300)]
    alerts = run(clickhouse_dsn, database, "pause", [*paused, *heartbeats("pause", 16, 300)])
    assert [(a.fingerprint, a.status, a.severity) for a in alerts] == [
        ("pause/traffic_stall/job", "firing", "info"), ("pause/traffic_stall/job", "resolved", "info")]
