"""The resource advisor's pure core: the knee of simulated curves, hot/starved hosts, data cost, scoring."""

from __future__ import annotations

import pytest

from tests.analyzer.advisor_sim import CURVES, history, knee_of
from vigil.analyzer.advisor.core import StepPoint, advise, curve
from vigil.analyzer.advisor.hosts import HostPoint, hosts, robust_z
from vigil.analyzer.advisor.score import predict, score
from vigil.analyzer.advisor.settings import AdvisorSettings

pytestmark = pytest.mark.pure
S = AdvisorSettings()


@pytest.mark.parametrize(("name", "rate", "grid", "knee", "step"), CURVES, ids=[c[0] for c in CURVES])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_recommended_node_count_is_within_one_step_of_the_knee(name: str, rate: object, grid: range, knee: int,
                                                                     step: int, seed: int) -> None:
    rec = advise("j", history(rate, grid, seed=seed), [], S)  # type: ignore[arg-type]
    assert rec.nodes is not None and abs(rec.nodes - knee) <= step, (name, rec.nodes, rec.reasons)
    assert not rec.still_scaling
    assert rec.predicted == pytest.approx(rate(rec.nodes), rel=0.05)  # type: ignore[operator]
    assert any(f"recommend {rec.nodes} nodes" in r for r in rec.reasons)


def test_a_job_that_still_scales_gets_its_largest_count_and_is_told_so() -> None:
    rec = advise("j", history(knee_of(100, 0.0), range(1, 7)), [], S, nodes_range=(1, 12))
    assert rec.nodes == 6 and rec.still_scaling
    assert any("still scales" in r and "up to 12" in r for r in rec.reasons)


def test_warm_up_steps_and_counts_with_too_few_steps_are_not_points() -> None:
    steps = history(knee_of(4, 0.0), [1, 2, 3, 4, 5, 6]) + history(knee_of(4, 0.0), [8], steps=4)
    pts = curve(steps, S)
    assert [p.nodes for p in pts] == [1, 2, 3, 4, 5, 6]  # 8 ran 4 steps: 1 after warm-up
    assert pts[1].efficiency == pytest.approx(1.0, abs=0.05)  # warm-up (3x slower) did not count


def test_the_range_limits_the_recommendation_and_no_history_recommends_nothing() -> None:
    rec = advise("j", history(knee_of(6, 0.05), range(1, 11)), [], S, nodes_range=(1, 4))
    assert rec.nodes == 4 and rec.still_scaling
    empty = advise("j", [], [], S)
    assert empty.nodes is None and empty.current is None and "no recommendation" in empty.reasons[-1]


def test_a_host_slower_at_compute_is_hot_and_one_waiting_for_data_is_starved() -> None:
    pts = [HostPoint(host=f"h{i}", compute_ms=200.0 + i, data_ms=20.0 + i % 3) for i in range(8)]
    pts[3] = HostPoint(host="h3", compute_ms=240.0, data_ms=21.0)
    pts[5] = HostPoint(host="h5", compute_ms=204.0, data_ms=80.0)
    hot, starved, reasons = hosts(pts, S)
    assert hot == ("h3",) and starved == ("h5",)
    assert any("hot host h3: compute 240" in r for r in reasons)
    assert any("starved host h5" in r for r in reasons)


def test_cpu_alone_makes_a_host_hot_and_a_tight_fleet_flags_nobody() -> None:
    pts = [HostPoint(host=f"h{i}", compute_ms=200.0, data_ms=20.0, cpu_pct=100.0 + i) for i in range(6)]
    assert hosts(pts, S)[:2] == ((), ())  # identical compute: the MAD floor keeps z at 0
    pts[2] = HostPoint(host="h2", compute_ms=200.0, data_ms=20.0, cpu_pct=390.0)
    hot, _, reasons = hosts(pts, S)
    assert hot == ("h2",) and "CPU 390 %" in reasons[0]
    assert robust_z({"a": 1.0, "b": 9.0}) == {"a": 0.0, "b": 0.0}  # two hosts: no peers to judge by


def test_the_data_loader_cost_is_its_share_of_step_time_at_the_current_count() -> None:
    steps = history(knee_of(4, 0.0), [2], data_share=0.2) + history(knee_of(4, 0.0), [4], data_share=0.25)
    rec = advise("j", steps, [], S)
    assert rec.current == 4 and rec.data_share == pytest.approx(0.25)
    assert any("25.0% of step time" in r and "33.3%" in r for r in rec.reasons)


def test_a_prediction_is_scored_against_the_later_generation_and_never_extrapolated() -> None:
    recorded = {2: 100.0, 4: 180.0}
    later = curve(history(lambda n: 171.0, [3], steps=20, noise=0.0), S)
    got = score(recorded, later)
    assert got is not None and got.nodes == 3 and got.predicted == pytest.approx(140.0)
    assert got.measured == pytest.approx(171.0) and got.error_pct == pytest.approx(22.14, abs=0.01)
    assert predict(recorded, 8) is None and score(recorded, curve(history(lambda n: 1.0, [8]), S)) is None
    assert score(recorded, []) is None


def test_a_step_point_of_no_time_is_skipped() -> None:
    steps = [StepPoint(nodes=2, step_ms=0.0, work=1.0)] * 10
    assert curve(steps, S) == ()
