"""The step's health signals: from a real CPU model through the spool line, the contract and the fast path."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tests.timer.timer_testutil import read_records, timer_config
from vigil.contract.colwire import decode_columnar
from vigil.contract.fastwire import decode_hot
from vigil.contract.telemetry import StepTiming
from vigil.contract.wire import encode_batch
from vigil.timer import StepTimer
from vigil.timer.health import grad_stats, update_ratio

pytestmark = pytest.mark.pure


def test_health_signals_reach_the_record_bounded(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    t = StepTimer(timer_config(spool_dir=tmp_path, device="cpu", job_id="j", host="h", rank=0, world_size=1))
    for i in range(3):
        with t.step():
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            if i == 1:
                model.weight.grad[0, 0] = float("nan")  # type: ignore[index]
            norm, bad = grad_stats(model.parameters())
            model.weight.grad.nan_to_num_(0.0)  # type: ignore[union-attr]  # the next steps stay finite
            before = [p.detach().clone() for p in model.parameters()]
            opt.step()
            t.health(loss=loss if i != 2 else torch.tensor(float("inf")), grad_norm=norm, nonfinite=bad,
                     update_ratio=update_ratio(before, list(model.parameters())))
    with t.step():  # reports nothing: the record carries no health keys
        pass
    t.close()
    recs = read_records(tmp_path)
    assert [r.get("nonfinite") for r in recs] == [0, 1, 1, None]
    assert recs[0]["loss"] > 0 and recs[0]["grad_norm"] > 0 and 0 < recs[0]["update_ratio"] < 1
    assert recs[1]["grad_norm"] is None and recs[2]["loss"] is None  # NaN norm and inf loss: null, counted
    assert "loss" not in recs[3]
    events = [StepTiming.model_validate(r) for r in recs]
    assert math.isclose(events[0].loss or 0, recs[0]["loss"])
    fast = decode_hot(encode_batch(events, rows=True))
    assert fast is not None and [e.nonfinite for e in fast] == [0, 1, 1, None]  # type: ignore[union-attr]
    cols = decode_columnar(encode_batch(events), "step")
    assert cols is not None and cols["grad_norm"][1] is None and cols["grad_norm"][0] == recs[0]["grad_norm"]


def test_the_contract_refuses_a_non_finite_or_negative_signal() -> None:
    base = {"job_id": "j", "host": "h", "rank": 0, "world_size": 1, "step": 0, "step_ms": 1.0}
    for bad in ({"grad_norm": -1.0}, {"update_ratio": float("nan")}, {"nonfinite": -1}, {"loss": float("inf")}):
        with pytest.raises(ValueError):
            StepTiming.model_validate({**base, **bad})
    assert StepTiming.model_validate({**base, "loss": -2.5}).loss == -2.5


def test_grad_stats_counts_only_where_the_norm_is_not_finite_and_exactly_when_asked() -> None:
    params = [torch.nn.Parameter(torch.ones(3, 3)), torch.nn.Parameter(torch.ones(4))]
    for p in params:
        p.grad = torch.ones_like(p)
    norm, bad = grad_stats(params)
    assert math.isclose(float(norm), 13**0.5, rel_tol=1e-6) and int(bad) == 0
    params[0].grad[0] = float("inf")  # type: ignore[index]
    params[1].grad[2] = float("nan")  # type: ignore[index]
    assert int(grad_stats(params)[1]) == 4 == int(grad_stats(params, exact=True)[1])
