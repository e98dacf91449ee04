"""The goodput ledger splits a job's wall clock into its categories, summing to it within 0.5 %; records that
claim more than the wall clock are said (over_s), never hidden in idle."""

from __future__ import annotations

import pytest

from vigil.contract.goodput import ideal_step_ms
from vigil.contract.ledger import CATEGORIES, ledger

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
    assert list(led.seconds) == list(CATEGORIES)
    assert led.seconds == {"productive": 100.0, "slowdown": 5.0, "checkpoint_save": 4.0, "steps_redone": 5.0,
                           "detect": 3.0, "decide": 0.5, "pause": 2.0, "diagnose": 10.0, "restart": 8.0,
                           "restore": 4.0, "idle": 20.0}
    assert led.balanced() and led.over_s == 0 and led.ettr == pytest.approx(100 / WALL)


def test_records_claiming_more_than_the_wall_clock_are_not_balanced() -> None:
    led = ledger(wall_s=100.0, ideal_ms=1000.0, step_ms=STEPS, outcomes=[OUTCOME])
    assert led.seconds["idle"] == 0 and led.over_s > 0 and not led.balanced()
