"""The simulator's health signals and replica digests judged by the numerical rules and the replica vote: each fault
named, healthy 64- and 512-host jobs silent."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from vigil.analyzer.detect.numrules import first_nonfinite, grad_outliers, loss_spikes
from vigil.analyzer.detect.replicas import vote
from vigil.analyzer.settings import NumericSettings
from vigil.analyzer.simulator.faults import parse_fault
from vigil.analyzer.simulator.health import HealthModel
from vigil.analyzer.simulator.layout import Layout

pytestmark = pytest.mark.pure
S = NumericSettings()
T0 = datetime(2026, 12, 1, tzinfo=UTC)


def walk(layout: Layout, steps: int, faults: list[str], seed: int = 0, digest_every: int = 0) -> list[tuple[str, Any]]:
    """What the rules find over `steps`, judged as the detectors do: the newest `window_steps` every 10 steps; with
    `digest_every`, the replica vote over the digests so far too (("sdc", (rank, first step differed)))."""
    model, parsed = HealthModel(layout, seed, digest_every), [parse_fault(f) for f in faults]
    digests: list[dict[str, Any]] = []
    since: dict[int, int] = {}  # rank -> the first step it differed (the detector keeps it for the run)
    coords = [layout.coords(r) for r in range(layout.world_size)]
    hosts = layout.host_names()
    by_step: dict[int, list[dict[str, Any]]] = {}
    losses: dict[int, float] = {}
    found: list[tuple[str, Any]] = []
    for i in range(steps):
        rows = [{"step": i, "rank": r, "host": hosts[r // layout.gpus_per_host], "pp": coords[r].pp,
                 "tp": coords[r].tp, "ts": T0, **h} for r, h in enumerate(model.signals(i, parsed))]
        by_step[i] = rows
        digests += [r for r in rows if r["digest"] is not None]
        ok = sorted(float(x["loss"]) for x in rows if x["loss"] is not None)
        if ok:
            losses[i] = ok[len(ok) // 2]
        by_step.pop(i - S.window_steps, None)
        if i % 10 == 9:
            window = [r for rs in by_step.values() for r in rs]
            found += [("grad", (f.evidence["rank"], f.evidence["step"])) for f in grad_outliers(window, S)]
            if (first := first_nonfinite(window)) is not None:
                found.append(("nonfinite", (first[0], [r for r, _ in first[1]])))
            spikes = loss_spikes({k: v for k, v in losses.items() if k > i - 250}, sorted(by_step), S,
                                 dict.fromkeys(losses, T0))
            found += [("loss", f.evidence["step"]) for f in spikes]
            if digests:
                reach = {r: (coords[r].pp, coords[r].tp, i) for r in range(layout.world_size)}
                found += [("sdc", (f.evidence.get("rank"), f.evidence["step"]))
                          for f in vote(digests, reach, 2, since) if ("sdc", (f.evidence.get("rank"),
                                                                             f.evidence["step"])) not in found]
                digests = [r for r in digests if r["step"] > i - 100]  # the window's newest digest steps
    return found


def test_each_fault_is_named_by_rank_and_step() -> None:
    lay = Layout(hosts=8, gpus_per_host=8, tp_size=2)
    found = walk(lay, 400, ["grad_drift:host=sim-host-0003,local_rank=5,start=300,magnitude=0.05",
                            "nan:host=sim-host-0006,local_rank=2,start=250,duration=3",
                            "loss_spike:start=350,magnitude=1.0,duration=8"])
    grad = [v for k, v in found if k == "grad"]
    assert grad and {r for r, _ in grad} == {29} and 300 <= min(s for _, s in grad) < 320
    assert {v[0] for k, v in found if k == "nonfinite"} == {250}
    assert all(v[1] == [50] for k, v in found if k == "nonfinite")
    assert {v for k, v in found if k == "loss"} == {350}


def test_a_rank_spiking_and_recovering_and_a_slow_drift_are_named() -> None:
    lay = Layout(hosts=8, gpus_per_host=8, tp_size=2)
    found = walk(lay, 300, ["grad_spike:host=sim-host-0002,local_rank=3,start=150,magnitude=1.0,duration=4",
                            "grad_drift:host=sim-host-0005,local_rank=0,start=200,magnitude=0.005"])
    grad = [v for k, v in found if k == "grad"]
    assert {r for r, _ in grad} == {19, 40}
    assert 150 <= min(s for r, s in grad if r == 19) < 154  # named while it spiked
    assert 200 < min(s for r, s in grad if r == 40) < 260  # 0.5 % a step stands out within ~40 steps


def test_a_corrupted_replica_is_named_from_its_first_digest_step_and_a_transient_once() -> None:
    lay = Layout(hosts=8, gpus_per_host=8, tp_size=2)
    found = walk(lay, 260, ["sdc:host=sim-host-0001,local_rank=4,start=60",
                            "sdc_transient:host=sim-host-0006,local_rank=1,start=120"], digest_every=50)
    assert [v for k, v in found if k == "sdc"] == [(12, 100), (49, 150)]
    model = HealthModel(lay, 0, 50)
    late = model.digests(200, [parse_fault("sdc_transient:host=sim-host-0006,local_rank=1,start=120")])
    assert late[49] == late[1] and model.digests(201, []) == [None] * 64  # the transient agrees again after


def test_a_healthy_512_host_job_with_digests_raises_no_numeric_or_replica_finding() -> None:
    """The budgets at 512 hosts: replica_mismatch 0 (replicas' digests are exact, so any finding fails), numeric_fault
    0.05 per job-hour (two z >= 6 hits in 20 steps). 120 steps of 4,096 ranks is two minutes of the job: it catches
    a rule that misfires at this width, not the hourly rate (bench/detection_physics.py's 512-host control does)."""
    assert walk(Layout(hosts=512, gpus_per_host=8, pp=4), 120, [], digest_every=50) == []


@pytest.mark.slow
def test_a_healthy_64_host_job_raises_nothing_over_2000_steps() -> None:
    assert walk(Layout(hosts=64, gpus_per_host=8, pp=2), 2000, [], digest_every=50) == []


@pytest.mark.clickhouse
def test_the_detector_names_them_from_stored_steps(clickhouse_dsn: str, database: str) -> None:
    """The simulated job's step records stored, the detector judged at instants after each fault, through its SQL."""
    from vigil.analyzer.alerts.book import AlertBook
    from vigil.analyzer.detect.numeric import NumericDetector
    from vigil.analyzer.engine import evaluate
    from vigil.analyzer.ingest.writer import ClickHouseWriter
    from vigil.analyzer.settings import AnalyzerSettings
    from vigil.analyzer.simulator.model import SimConfig, Simulation
    from vigil.clickhouse.client import connect
    from vigil.contract import StepTiming

    faults = ["grad_drift:host=sim-host-0003,local_rank=1,start=120,magnitude=0.05",
              "nan:host=sim-host-0001,local_rank=0,start=150", "loss_spike:start=180,duration=5"]
    sim = Simulation(SimConfig(job="num", layout=Layout(hosts=8, gpus_per_host=4, tp_size=2),
                               faults=[parse_fault(f) for f in faults], seed=3, start=T0, gc_prob=0.0))
    client = connect(clickhouse_dsn, database=database)
    writer = ClickHouseWriter(client=client)
    events = [sim.registration()]
    for i in range(200):
        events += [e for e in sim.step(i) if isinstance(e, StepTiming)]
    assert writer.write(events) == []

    def judged(step: int) -> set[str]:
        at = sim.step_starts[step]
        alerts = evaluate(client, AnalyzerSettings(), AlertBook(), "num", at, detectors=[NumericDetector()])
        return {f"{a.subject}@{a.evidence.get('step')}" for a in alerts if a.status == "firing"}

    assert judged(110) == set()
    assert {s.split("@")[0] for s in judged(140)} == {"sim-host-0003/rank13"}
    assert "nonfinite@150" in judged(160)
    assert "loss@180" in judged(195)
