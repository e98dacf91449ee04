"""The numerical rules on rows as the detector reads them: the odd rank, the first non-finite step, loss spikes."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vigil.analyzer.detect.numrules import first_nonfinite, grad_outliers, loss_spikes
from vigil.analyzer.settings import NumericSettings

pytestmark = pytest.mark.pure
T0 = datetime(2026, 12, 1, tzinfo=UTC)
S = NumericSettings()


def rows(steps: range, ranks: int = 64, tp: int = 2, drift: dict[int, float] | None = None,
         nan: tuple[int, int] | None = None, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for step in steps:
        for r in range(ranks):
            g = math.exp(rng.gauss(0, 0.03)) * (1 + (r % tp)) * (1 + (drift or {}).get(r, 0) * step)
            bad = nan is not None and (step, r) == nan
            out.append({"step": step, "rank": r, "host": f"h{r // 8:03d}", "pp": 0, "tp": r % tp,
                        "grad_norm": None if bad else g, "loss": 2.0, "nonfinite": 3 if bad else 0,
                        "ts": T0 + timedelta(seconds=step)})
    return out


def test_a_drifting_rank_is_named_and_healthy_peers_are_not() -> None:
    assert grad_outliers(rows(range(0, 20)), S) == []
    [f] = grad_outliers(rows(range(0, 20), drift={13: 0.05}), S)
    assert f.alert == "numeric_fault" and f.evidence["rank"] == 13 and f.host == "h001"
    assert f.evidence["step"] == min(f.evidence["steps"]) and len(f.evidence["steps"]) >= S.hits


def test_one_step_out_is_not_a_fault() -> None:
    rs = rows(range(0, 20))
    rs[5 * 64 + 7]["grad_norm"] *= 100
    assert grad_outliers(rs, S) == []


def test_the_first_non_finite_rank_and_step() -> None:
    assert first_nonfinite(rows(range(10))) is None
    got = first_nonfinite(rows(range(10), nan=(6, 21)))
    assert got is not None and got[:2] == (6, [(21, "h002")])


def test_a_loss_spike_against_the_jobs_history_and_its_recovery() -> None:
    rng = random.Random(1)
    losses = {s: 3.0 - s * 0.001 + rng.gauss(0, 0.01) for s in range(300)}
    times = dict.fromkeys(losses, T0)
    assert loss_spikes(losses, list(range(250, 300)), S, times) == []
    losses[280] = 6.0
    [f] = loss_spikes(losses, list(range(250, 300)), S, times)
    assert f.evidence["step"] == 280 and f.evidence["recovered"]
