"""Pure logic: processors, the alert book's lifecycle, fault specs, the layout, settings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.crafted import T0
from vigil.analyzer.alerts.book import AlertBook
from vigil.analyzer.alerts.view import current
from vigil.analyzer.detect.base import Finding
from vigil.analyzer.detect.straggler import judge
from vigil.analyzer.settings import AnalyzerSettings
from vigil.analyzer.simulator.faults import parse_fault
from vigil.analyzer.simulator.layout import Layout
from vigil.analyzer.simulator.model import SimConfig, Simulation
from vigil.settings import SettingsError

pytestmark = pytest.mark.pure


def finding(sev: str = "warning") -> Finding:
    return Finding(alert="straggler", subject="h1/forward", host="h1", severity=sev, summary="slow",  # type: ignore[arg-type]
                   since=T0 - timedelta(seconds=5))


def test_book_lifecycle_firing_refresh_escalate_resolve_restore() -> None:
    book = AlertBook(refresh_s=60)
    first = book.update("j", T0, ["straggler"], [finding()])
    assert [(a.status, a.first_seen) for a in first] == [("firing", T0 - timedelta(seconds=5))]
    assert book.update("j", T0 + timedelta(seconds=2), ["straggler"], [finding()]) == []  # unchanged: quiet
    up = book.update("j", T0 + timedelta(seconds=4), ["straggler"], [finding("critical")])
    assert [a.severity for a in up] == ["critical"] and up[0].first_seen == first[0].first_seen
    assert len(book.update("j", T0 + timedelta(seconds=70), ["straggler"], [finding("critical")])) == 1  # refresh
    assert book.update("j", T0 + timedelta(seconds=72), ["mfu_drift"], []) == []  # straggler did not run
    done = book.update("j", T0 + timedelta(seconds=74), ["straggler"], [])
    assert [a.status for a in done] == ["resolved"] and done[0].fingerprint == "j/straggler/h1/forward"
    restored = AlertBook()
    restored.restore([*first, *up, *done])
    assert restored.firing() == [] and current([*first, *up, *done], include_resolved=True)[0].status == "resolved"
    replayed = AlertBook()
    replayed.restore(first)
    assert replayed.update("j", T0 + timedelta(seconds=1), ["straggler"], [finding()]) == []  # no double fire


def test_straggler_judge_needs_k_of_n_and_peers() -> None:
    s = AnalyzerSettings().straggler
    rows = [{"phase": "forward", "window": w, "host": f"h{h}", "mean_ms": 100.0 * (1.06 if h == 3 and w >= 2 else 1 + h * 0.001),
             "window_end": T0 + timedelta(seconds=w)} for w in range(5) for h in range(10)]
    assert {f.subject for f in judge(rows, {}, s)} == {"h3/forward"}
    assert judge([r for r in rows if int(r["window"]) < 4], {}, s) == []  # only 2 of 4 windows
    assert {f.subject for f in judge([r for r in rows if int(r["window"]) < 4], {}, s, {"h3/forward"})} == {"h3/forward"}


def test_straggler_tiny_stage_groups_compare_hosts_to_their_own_stage() -> None:
    # 8 hosts in 4 pipeline stages of 2: too few per stage for a robust centre of its own. The
    # last stage is legitimately 6% heavier; only h2 (stage 1) is really slow.
    s = AnalyzerSettings().straggler
    peers = {f"h{h}": str(h // 2) for h in range(8)}
    rows = [{"phase": "forward", "window": w, "host": f"h{h}",
             "mean_ms": 100.0 * (1.06 if h >= 6 else 1.0) * (1.10 if h == 2 else 1 + h * 0.001),
             "window_end": T0 + timedelta(seconds=w)} for w in range(5) for h in range(8)]
    found = judge(rows, peers, s)
    assert {f.subject for f in found} == {"h2/forward"}
    assert 8.0 <= found[0].evidence["slowdown_pct"] <= 12.0  # against its stage partner, not a median it pulls up
    assert found[0].evidence["peer_median_ms"] == pytest.approx(100.3, abs=1.0)
    healthy = [{**r, "mean_ms": 100.0 * (1.06 if r["host"] in ("h6", "h7") else 1.0)} for r in rows]
    assert judge(healthy, peers, s) == []


def test_straggler_ignores_a_tiny_phase_whose_excess_costs_nothing() -> None:
    # a 0.2 ms data-loading phase 3x slower on one host: huge in %, 0.4 ms of a step
    s = AnalyzerSettings().straggler
    rows = [{"phase": phase, "window": w, "host": f"h{h}",
             "mean_ms": base * (3.0 if h == 3 else 1 + h * 0.001), "window_end": T0 + timedelta(seconds=w)}
            for w in range(5) for h in range(10) for phase, base in (("data", 0.2), ("forward", 5.0))]
    assert {f.subject for f in judge(rows, {}, s)} == {"h3/forward"}
    assert list(judge(rows, {}, s)[0].evidence["phases"]) == ["forward"]
    # without the excess floor both phases are slow: still one alert for the host, both phases in it
    [both] = judge(rows, {}, AnalyzerSettings(straggler_min_excess_ms=0).straggler)
    assert both.subject == "h3/forward" and set(both.evidence["phases"]) == {"data", "forward"}


@pytest.mark.parametrize("spec, message", [
    ("bogus:host=a", "unknown kind"),
    ("straggler:start=3", "host=NAME is required"),
    ("straggler:host=h,start=x", "integers"),
    ("straggler:host=h,colour=red", "unknown option"),
    ("nic_drop:host=h,magnitude=2", "fraction lost"),
    ("xid:host=all", "needs one host"),
])
def test_bad_fault_specs_are_value_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_fault(spec)


def test_fault_defaults_and_expected_alerts() -> None:
    f = parse_fault("straggler:host=sim-host-0003,start=100,magnitude=0.08")
    assert (f.host, f.start, f.magnitude, f.phase) == ("sim-host-0003", 100, 0.08, "forward")
    assert f.expected("j", 8, 3) == ("straggler", "sim-host-0003/forward")
    assert parse_fault("mfu_decay:start=5").host == "all"
    assert parse_fault("process_exit:host=x,local_rank=2").expected("j", 8, 3) == ("process_exit", "x/rank26")


def test_layout_names_and_3d_coords() -> None:
    lay = Layout(hosts=8, gpus_per_host=4, pp=2)
    assert lay.host_names()[:2] == ["sim-host-0000", "sim-host-0001"]
    assert (lay.tp, lay.dp, lay.world_size) == (4, 4, 32)
    assert [lay.stage_of_host(h) for h in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    with pytest.raises(ValueError, match="unknown host"):
        lay.host_index("sim-host-0008")
    with pytest.raises(ValueError):
        Layout(hosts=6, pp=4)


@pytest.mark.parametrize("spec", ["gpu_straggler:host=sim-host-0001,gpu=4", "process_exit:host=sim-host-0001,local_rank=9"])
def test_a_fault_on_a_gpu_the_host_lacks_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match=r"not one of the host's 4 GPUs \(0 \.\. 3\)"):
        Simulation(SimConfig(job="j", layout=Layout(hosts=4, gpus_per_host=4), faults=[parse_fault(spec)], start=T0))


def test_settings_reject_bad_k_of_n(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIGIL_ANALYZER_STRAGGLER_K", "6")
    with pytest.raises(SettingsError, match=r"VIGIL_ANALYZER_STRAGGLER: .*straggler_k \(6\) must not exceed straggler_n \(5\)"):
        AnalyzerSettings.load()


def test_sectioned_settings_keep_their_flat_names(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "vigil.toml"
    cfg.write_text("[analyzer]\nstraggler_k = 2\ntraffic_drop_pct = 40\n[analyzer.mfu]\ndrop_pct = 7\n")
    monkeypatch.setenv("VIGIL_CONFIG", str(cfg))
    monkeypatch.setenv("VIGIL_ANALYZER_STRAGGLER_Z", "5.5")
    monkeypatch.setenv("VIGIL_ANALYZER_TRAFFIC_DROP_PCT", "30")  # the environment wins over the file
    s = AnalyzerSettings.load(heartbeat_miss_intervals=4)  # keywords too
    assert (s.straggler.k, s.straggler.z, s.traffic.drop_pct, s.mfu.drop_pct, s.heartbeat.miss_intervals) == (
        2, 5.5, 30.0, 7.0, 4.0)
    assert s.straggler.n == 5 and s.group_id == "vigil-analyzer"


def test_heartbeat_judges_each_host_on_its_own_clock() -> None:
    from vigil.analyzer.detect.heartbeat import judge
    from vigil.analyzer.settings import HeartbeatSettings

    at = T0 + timedelta(minutes=5)

    def row(host: str, silent_s: float, recent: int = 3) -> dict[str, object]:
        return {"host": host, "first_ts": T0, "base_interval": 2.0, "last_ts": at - timedelta(seconds=silent_s),
                "interval_s": 2.0, "recent": 0 if silent_s >= 6 else recent}

    s = HeartbeatSettings()
    rows = [row("lost", 10), row("fine", 1), row("late", 30)]
    known = {"lost", "fine"}  # "late": its heartbeats still arrive but are not stored up to `at` yet
    subjects = lambda fs: sorted(f.subject for f in fs)  # noqa: E731
    assert subjects(judge(rows, s, at, caught_up=lambda h: h in known)) == ["lost"]
    assert subjects(judge(rows, s, at, caught_up=lambda h: h in known, firing={"late"})) == ["late", "lost"]  # held
    assert subjects(judge(rows, s, at)) == ["late", "lost"]  # replay: everything stored is all there is
    # the job stopped (ended, restarting): every host fell silent within one interval of the others, and the
    # last to beat is not beating steadily: nobody is paged, whoever crossed the threshold first
    stopped = [row("a", 6.5), row("b", 5.0, recent=1), row("c", 4.6, recent=1)]
    assert judge(stopped, s, at) == []
    assert subjects(judge(stopped, s, at, firing={"a"})) == ["a"]  # ... and one already lost stays lost
    resumed = [row("a", 61), row("b", 0.3, recent=1)]  # the whole job back after a minute: "a" beats next
    assert judge(resumed, s, at) == []
    assert judge([row("alone", 10)], s, at) == []  # no other host: its silence is the job's
    restarted = at - timedelta(seconds=60)  # a restart left "gone" out: no longer a member
    assert subjects(judge([row("gone", 120), row("lost", 10), row("fine", 1)], s, at, run_start=restarted)) == ["lost"]


def test_shuffled_delivery_keeps_each_hosts_stream_in_order() -> None:
    """A keyed topic interleaves hosts at will but keeps each host's events of one kind in order: so does `shuffle`."""
    import random

    from vigil.analyzer.simulator.delivery import interleave
    from vigil.contract import Event

    sim = Simulation(SimConfig(job="mix", layout=Layout(hosts=8, gpus_per_host=1), seed=1, start=T0, step_ms=1000.0))
    events = [e for i in range(60) for e in sim.step(i)]  # a 60-s burst, as a backlogged consumer delivers it
    mixed = interleave(events, random.Random(3))
    assert sorted(e.event_id for e in mixed) == sorted(e.event_id for e in events)  # the same events

    def streams(evs: list[Event]) -> dict[tuple[str, str], list[str]]:
        out: dict[tuple[str, str], list[str]] = {}
        for e in evs:
            out.setdefault((e.host, e.kind), []).append(e.event_id)
        return out

    assert streams(mixed) == streams(events)  # each host's heartbeats, steps, NIC samples: in their order
    assert [e.host for e in mixed] != [e.host for e in events]  # hosts interleaved differently
    assert [e.event_id for e in interleave(events, random.Random(3))] == [e.event_id for e in mixed]  # seeded


def test_a_simulation_faster_than_real_time_ends_about_now_not_in_the_future() -> None:
    from datetime import UTC, datetime, timedelta

    from vigil.app.cli.analyzer import default_start

    now = datetime(2026, 11, 25, 12, tzinfo=UTC)
    assert default_start(now, 300, 1000.0, 1.0) == now  # real time: events are stamped as they happen
    assert default_start(now, 300, 1000.0, 0.0) == now - timedelta(seconds=330)  # as fast as possible
    # 25x: ~13 s of wall clock, so it starts ~317 s back and its last step lands ~now
    assert default_start(now, 300, 1000.0, 25.0) == now - timedelta(seconds=330 * 24 / 25)


def test_watermark_waits_for_a_bursty_source_and_lets_a_lost_one_go() -> None:
    """A source silent in wall time still holds the watermark while the job is less than `gone_lag_s` of event time
    ahead of it (its next burst is on its way: no window is judged on part of its samples); once the job has moved
    that far past it, it is gone (its silence final). A job whose every source is silent has stopped."""
    from vigil.analyzer.clock import clock_of

    t0 = datetime(2026, 11, 2, tzinfo=UTC)
    now = t0 + timedelta(seconds=100)

    def srcs(lag_s: float) -> list[tuple[str, str, datetime, datetime, datetime]]:
        fresh = [(f"h{i}", "nic", t0, t0 + timedelta(seconds=60), now) for i in range(3)]
        silent = ("h9", "nic", t0, t0 + timedelta(seconds=60 - lag_s), now - timedelta(seconds=20))
        return [*fresh, silent]

    bursty = clock_of("j", srcs(6), now, idle_s=5, max_lag_s=120, gone_lag_s=10)
    assert bursty.sources[("h9", "nic")].alive and bursty.watermark == t0 + timedelta(seconds=54)
    lost = clock_of("j", srcs(12), now, idle_s=5, max_lag_s=120, gone_lag_s=10)
    assert not lost.sources[("h9", "nic")].alive and lost.watermark == t0 + timedelta(seconds=60)
    assert not lost.stopped
    before = clock_of("j", srcs(6), now, idle_s=5, max_lag_s=120, gone_lag_s=0)  # the rule off: let go at once
    assert before.watermark == t0 + timedelta(seconds=60)
    stopped = clock_of("j", srcs(6), now + timedelta(seconds=60), idle_s=5, max_lag_s=120, gone_lag_s=10)
    assert stopped.stopped and not any(c.alive for c in stopped.sources.values())


def test_the_costly_detectors_never_share_an_instant() -> None:
    """traffic_stall, straggler and nic_flap each read thousands of rows per turn at 10,000 GPUs (bench/RESULTS.md:
    ~0.3-1.1 s each): a turn that ran two of them ran past the 2 s interval. Their cadences and phases keep them
    apart on the 2 s grid."""
    from vigil.analyzer.detect.base import due
    from vigil.analyzer.detect.flap import FlapDetector
    from vigil.analyzer.detect.straggler import StragglerDetector
    from vigil.analyzer.detect.traffic import TrafficDetector

    t0 = datetime(2026, 11, 29, 8, 0, 0, tzinfo=UTC)  # a multiple of 8 s since the epoch
    grid = [t0 + timedelta(seconds=2 * k) for k in range(60)]
    runs = {d.name: [at for at in grid if due(d, at, 2.0)] for d in (TrafficDetector(), StragglerDetector(), FlapDetector())}
    assert [at.second for at in runs["straggler"][:3]] == [2, 10, 18] and [at.second for at in runs["nic_flap"][:3]] == [6, 14, 22]
    assert len(runs["traffic_stall"]) == 30 and len(runs["straggler"]) == len(runs["nic_flap"]) == 15
    for at in grid:
        assert sum(at in r for r in runs.values()) <= 1, at


def test_mfu_drift_release_is_noise_aware() -> None:
    # A firing drift resolves at or below half drop_pct less 2 standard errors of the measured drop (from the steps'
    # spread), and at or below a quarter of drop_pct whatever the noise: a drift that hovers near its threshold with
    # noisy steps stays one alert; one back at its baseline, or with a drop too small to matter, resolves.
    import math

    from vigil.analyzer.detect.mfu import judge as judge_mfu
    from vigil.analyzer.detect.mfu import release_pct

    s = AnalyzerSettings().mfu
    wiggle = [(i % 5) - 2 for i in range(50)]  # -2..2: median 0, median absolute deviation 1

    def rows(drop_pct: float, noise: float) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        steps = [*range(20, 70), *range(100, 120)]  # the baseline after warm-up, then the current window
        level = 0.4 * (1 - drop_pct / 100)
        vals = [(0.4 if k < 70 else level) * (1 + noise * wiggle[i % 50]) for i, k in enumerate(steps)]
        return ([{"step": k, "step_ms": 1000.0, "smfu": v, "nmfu": 1, "last_ts": T0 + timedelta(seconds=k)}
                 for k, v in zip(steps, vals, strict=True)],
                [{"phase": "forward", "step": k, "mean_ms": 100.0 if k < 70 else 110.0} for k in steps])

    def release(noise: float) -> float:
        base, cur = rows(0, noise)[0][:50], rows(0, noise)[0][50:]
        return release_pct([float(r["smfu"]) for r in base], [float(r["smfu"]) for r in cur], s)  # type: ignore[arg-type]

    se = 1.2533 * 1.4826 * 1.0 * math.sqrt(1 / 50 + 1 / 20)  # a 1 % wiggle: sigma 1.48 % of the baseline
    assert release(0.01) == pytest.approx(s.drop_pct / 2 - 2 * se)  # 1.52
    assert release(0.0) == s.drop_pct / 2  # quiet steps: half drop_pct, as before
    assert release(0.04) == s.drop_pct / 4  # sigma 5.9 %: the floor
    assert judge_mfu(*rows(4.0, 0.01), s) == []  # under drop_pct: nothing fires
    assert judge_mfu(*rows(5.0, 0.01), s)[0].evidence["drop_pct"] == 5.0
    for drop, noise, held in ((1.6, 0.01, True), (1.4, 0.01, False), (2.0, 0.0, False), (2.0, 0.04, True),
                              (1.0, 0.04, False), (0.0, 0.04, False)):
        assert bool(judge_mfu(*rows(drop, noise), s, firing=True)) == held, (drop, noise)
