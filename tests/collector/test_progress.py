"""An agent's progress counts completed steps only: the failed step the timer records when a fault raises in it
did not complete, so it is not the host's last step (the outcome's steps lost count on it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from vigil.collector.control.progress import Progress
from vigil.contract import StepTiming

T0 = datetime(2026, 11, 1, 12, tzinfo=UTC)


def _step(step: int, failed: bool = False) -> StepTiming:
    return StepTiming(job_id="j", host="h1", ts=T0 + timedelta(seconds=step), rank=0, local_rank=0, world_size=1,
                      step=step, step_ms=100.0 + step, failed=failed)


@pytest.mark.pure
def test_a_failed_step_is_not_the_last_step_completed() -> None:
    p = Progress()
    p.reset(T0)
    p.observe([_step(s) for s in range(1, 15)] + [_step(15, failed=True)])
    snap = p.snapshot()
    assert (snap.first_step, snap.last_step, snap.steps, snap.step_ms) == (1, 14, 14, 107.5)
