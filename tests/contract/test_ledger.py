"""The goodput ledger splits a job's wall clock into its categories, summing to it within 0.5 %; records that
claim more than the wall clock are said (over_s), never hidden in idle. The fleet's sums likewise, in GPU-hours.
The checkpoint interval the ledger implies is Young/Daly's."""

from __future__ import annotations

import math
import random

import pytest

from vigil.contract.ckpt_interval import describe, implied, waste, young_daly_s
from vigil.contract.goodput import ideal_step_ms
from vigil.contract.ledger import CATEGORIES, Category, StepTime, fleet, ledger

pytestmark = pytest.mark.pure

# 100 steps of 1 s, 10 of them slowed to 1.5 s; one recovery; two saves blocking 2 s each; 20 s of launch
STEPS = [1000.0] * 90 + [1500.0] * 10
OUTCOME = {"detect_s": 3.0, "decide_s": 0.5, "pause_s": 2.0, "diagnose_s": 10.0, "restart_s": 12.0,
           "checkpoint_load_s": 4.0, "steps_lost": 5}
WALL = 105 + 4 + 3 + 0.5 + 2 + 10 + 12 + 5 + 20


def test_each_category_from_its_record_and_the_rest_is_idle() -> None:
    ideal = ideal_step_ms(STEPS)
    assert ideal == 1000.0
    led = ledger(wall_s=WALL, ideal_ms=ideal, step_ms=STEPS, save_blocked_ms=[2000, 2000], outcomes=[OUTCOME])
    assert list(led.seconds) == list(CATEGORIES) == [c.value for c in Category]
    assert led.seconds == {"productive": 100.0, "slowdown": 5.0, "data_loader": 0.0, "checkpoint_save": 4.0,
                           "steps_redone": 5.0, "detect": 3.0, "decide": 0.5, "pause": 2.0, "diagnose": 10.0,
                           "restart": 8.0, "restore": 4.0, "elastic_resize": 0.0, "sdc": 0.0, "idle": 20.0}
    assert led.balanced() and led.over_s == 0 and led.ettr == pytest.approx(100 / WALL)


def test_records_claiming_more_than_the_wall_clock_are_not_balanced() -> None:
    led = ledger(wall_s=100.0, ideal_ms=1000.0, step_ms=STEPS, outcomes=[OUTCOME])
    assert led.seconds["idle"] == 0 and led.over_s > 0 and not led.balanced()


def test_data_wait_resize_and_sdc_each_take_their_time_from_the_right_category() -> None:
    # 10 steps whose data phase (in the step) took 400 ms over its typical 100 ms; 5 steps that loaded 300 ms of
    # data before the step opened (not in their step time); one SDC check of 200 ms; a straggler step of +500 ms
    steps = ([StepTime(1000.0, data_ms=100.0)] * 80 + [StepTime(1400.0, data_ms=500.0)] * 10
             + [StepTime(1000.0, data_ms=100.0, data_outside_ms=300.0)] * 5 + [StepTime(1200.0, data_ms=100.0,
                                                                                        sdc_ms=200.0)]
             + [StepTime(1500.0, data_ms=100.0)] * 4)
    scale = {**OUTCOME, "category": "scale", "detect_s": 0.0, "diagnose_s": 0.0}
    replay = {"category": "silent_data_corruption", "detect_s": 9.0, "decide_s": 3.0, "restart_s": 6.0,
              "checkpoint_load_s": 1.0, "steps_lost": 2}  # (it trained on while detected: those steps are the lost)
    led = ledger(wall_s=500.0, ideal_ms=1000.0, step_ms=steps, outcomes=[OUTCOME, scale, replay])
    s = led.seconds
    assert s["data_loader"] == pytest.approx(10 * 0.4 + 5 * 0.3)
    assert s["slowdown"] == pytest.approx(4 * 0.5)  # the data and check time is not the straggler's
    assert s["sdc"] == pytest.approx(0.2 + 6.0 + 2.0)  # the check, the replay's restart and the steps it redid
    assert s["elastic_resize"] == pytest.approx(0.5 + 2.0 + 12.0 + 5.0)  # the whole scale-up, steps redone too
    assert (s["detect"], s["restore"], s["steps_redone"]) == (3.0, 4.0, 5.0)  # the fault's own, once
    assert led.balanced() and s["idle"] > 0


def test_a_data_phase_explains_no_more_than_its_step_ran_over() -> None:
    led = ledger(wall_s=10.0, ideal_ms=1000.0, step_ms=[StepTime(1100.0, data_ms=900.0)], typical_data_ms=100.0)
    assert led.seconds["data_loader"] == pytest.approx(0.1) and led.seconds["slowdown"] == 0


def test_random_records_always_sum_to_the_wall_clock() -> None:
    rnd = random.Random(51)
    for _ in range(200):
        steps = [StepTime(rnd.uniform(900, 3000), rnd.choice([1.0, rnd.random()]), rnd.uniform(0, 800),
                          rnd.choice([0.0, rnd.uniform(0, 500)]), rnd.choice([0.0, rnd.uniform(0, 300)]))
                 for _ in range(rnd.randint(1, 60))]
        outs = [{"category": rnd.choice(["", "scale", "silent_data_corruption", "host_fault"]), "detect_s": rnd.uniform(0, 5),
                 "restart_s": rnd.uniform(0, 20), "checkpoint_load_s": rnd.uniform(0, 3),
                 "steps_lost": rnd.randint(0, 4)} for _ in range(rnd.randint(0, 3))]
        led = ledger(wall_s=rnd.uniform(50, 400), ideal_ms=1000.0, step_ms=steps, outcomes=outs,
                     save_blocked_ms=[rnd.uniform(0, 3000)])
        claimed = sum(v for k, v in led.seconds.items() if k != "idle")
        assert all(v >= 0 for v in led.seconds.values())
        assert led.balanced() == (claimed <= led.wall_s * 1.005 + 1e-9), led
        assert led.over_s == pytest.approx(max(0.0, claimed - led.wall_s), abs=0.01)


def test_the_fleet_in_gpu_hours_sums_to_its_gpus_wall_clock() -> None:
    a = ledger(wall_s=3600.0, ideal_ms=1000.0, step_ms=[1000.0] * 3000)  # 600 s idle
    b = ledger(wall_s=1800.0, ideal_ms=500.0, step_ms=[500.0] * 3600)
    f = fleet({"a": (a, 8.0), "b": (b, 64.0)})
    assert f.wall_gpu_hours == pytest.approx(8 + 32) and f.balanced()
    assert f.gpu_hours["productive"] == pytest.approx(3000 * 8 / 3600 + 32)
    assert f.gpu_hours["idle"] == pytest.approx(600 * 8 / 3600) and f.ettr == pytest.approx(1 - (4 / 3) / 40)


def test_young_daly_interval_and_its_waste() -> None:
    c, m = 10.0, 3600.0 * 24
    t = young_daly_s(c, m)
    assert math.sqrt(2 * c * m) - c < t < math.sqrt(2 * c * m) * 1.02  # Daly's refinement of Young's
    best = min(range(60, 20000, 10), key=lambda x: waste(x, c, 30.0, m))  # the first-order waste's minimum
    assert abs(best - t) / t < 0.02
    assert young_daly_s(100.0, 40.0) == 40.0  # a save longer than two MTBFs: checkpoint every MTBF
    with pytest.raises(ValueError):
        young_daly_s(0.0, m)


def test_the_implied_interval_beside_the_current_one() -> None:
    ci = implied(wall_s=36_000.0, failures=4, save_s=5.0, restore_s=120.0, current_s=60.0)
    assert ci.mtbf_s == 9000.0 and ci.optimal_s == pytest.approx(young_daly_s(5.0, 9000.0)) and not ci.bound
    assert ci.waste_optimal is not None and ci.waste_current is not None and ci.waste_optimal < ci.waste_current
    line = describe(ci)
    assert "current 60 s" in line and f"{ci.optimal_s:,.0f} s" in line and "4 failures" in line
    none_yet = implied(wall_s=1000.0, failures=0, save_s=2.0, restore_s=None, current_s=None)
    assert none_yet.bound and none_yet.mtbf_s == 1000.0 and ">= " in describe(none_yet)
    assert implied(wall_s=1000.0, failures=1, save_s=None, restore_s=None, current_s=30.0).optimal_s is None
