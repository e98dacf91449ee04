"""The simulator's health signals judged by the numerical rules: each fault named, a healthy 64-host job silent."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from vigil.analyzer.detect.numrules import first_nonfinite, grad_outliers, loss_spikes
from vigil.analyzer.settings import NumericSettings
from vigil.analyzer.simulator.faults import parse_fault
from vigil.analyzer.simulator.health import HealthModel
from vigil.analyzer.simulator.layout import Layout

pytestmark = pytest.mark.pure
S = NumericSettings()
T0 = datetime(2026, 12, 1, tzinfo=UTC)


def walk(layout: Layout, steps: int, faults: list[str], seed: int = 0) -> list[tuple[str, Any]]:
    """What the rules find over `steps`, judged as the detector does: the newest `window_steps` every 10 steps."""
    model, parsed = HealthModel(layout, seed), [parse_fault(f) for f in faults]
    coords = [layout.coords(r) for r in range(layout.world_size)]
    hosts = layout.host_names()
    by_step: dict[int, list[dict[str, Any]]] = {}
    losses: dict[int, float] = {}
    found: list[tuple[str, Any]] = []
    for i in range(steps):
        rows = [{"step": i, "rank": r, "host": hosts[r // layout.gpus_per_host], "pp": coords[r].pp,
                 "tp": coords[r].tp, "ts": T0, **h} for r, h in enumerate(model.signals(i, parsed))]
        by_step[i] = rows
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


@pytest.mark.slow
def test_a_healthy_64_host_job_raises_nothing_over_2000_steps() -> None:
    assert walk(Layout(hosts=64, gpus_per_host=8, pp=2), 2000, []) == []


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
