"""Replica digests: every flipped bit seen, order-sensitive, every N steps through the spool, contract and fast path."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.timer.timer_testutil import read_records, timer_config
from vigil.contract.colwire import decode_columnar
from vigil.contract.fastwire import decode_hot
from vigil.contract.telemetry import StepTiming
from vigil.contract.wire import encode_batch
from vigil.timer import StepTimer
from vigil.timer import digest as dg

pytestmark = pytest.mark.pure


def _digest(params: list[torch.Tensor]) -> int:
    return int(dg.param_digest(params))


@pytest.mark.parametrize("hashed", [True, False], ids=["hash_tensor", "weighted_sum"])
def test_every_single_bit_flip_and_a_swap_changes_the_digest(monkeypatch: pytest.MonkeyPatch, hashed: bool) -> None:
    if not hashed:
        monkeypatch.delattr(torch, "hash_tensor", raising=False)
    g = torch.Generator().manual_seed(1)
    params = [torch.randn(3 * dg.WIDTH + 17, generator=g), torch.randn(5, 7, generator=g).to(torch.bfloat16),
              torch.randn(11, generator=g, dtype=torch.float64)]
    base = _digest(params)
    assert base == _digest([p.clone() for p in params])  # equal replicas agree
    for k, p in enumerate(params):
        size = p.numel() * p.element_size()
        for byte in (0, 1, size // 2, size - 1):
            for bit in range(8):  # every bit of the bytes at the start, middle and end of each tensor
                flipped = [q.clone() for q in params]
                flipped[k].reshape(-1).view(torch.uint8)[byte] ^= 1 << bit
                assert _digest(flipped) != base, (k, byte, bit)
    swapped = [p.clone() for p in params]
    swapped[0][[0, dg.WIDTH + 3]] = swapped[0][[dg.WIDTH + 3, 0]]  # two words from two rows traded places
    assert _digest(swapped) != base
    assert _digest(params[::-1]) != base  # the tensors' order counts


def test_a_digest_every_n_steps_reaches_the_record_and_the_fast_path(tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 2)
    t = StepTimer(timer_config(spool_dir=tmp_path, device="cpu", job_id="j", host="h", rank=0, world_size=1,
                               digest_every=3))
    taken = []
    for _ in range(7):
        with t.step():
            taken.append(t.digest(model.parameters()))
    assert not t.digest(model.parameters())  # outside a step: nothing
    t.close()
    assert taken == [True, False, False, True, False, False, True]
    recs = read_records(tmp_path)
    want = _digest(list(model.parameters()))
    assert [r.get("digest") for r in recs] == [want, None, None, want, None, None, want]
    events = [StepTiming.model_validate(r) for r in recs]
    fast = decode_hot(encode_batch(events, rows=True))
    assert fast is not None and [e.digest for e in fast] == [r.get("digest") for r in recs]  # type: ignore[union-attr]
    cols = decode_columnar(encode_batch(events), "step")
    assert cols is not None and cols["digest"] == [r.get("digest") for r in recs]


def test_a_failing_digest_warns_once_and_never_reaches_training(tmp_path: Path) -> None:
    t = StepTimer(timer_config(spool_dir=tmp_path, device="cpu", job_id="j", host="h", rank=0, world_size=1))
    with t.step(), pytest.warns(RuntimeWarning, match="replica digests off"):
        assert not t.digest([object()])  # not a tensor
    with t.step(step=50):
        assert not t.digest([torch.ones(2)])  # off for good
    t.close()
    assert all("digest" not in r for r in read_records(tmp_path))


def test_the_contract_bounds_the_digest_to_int64() -> None:
    base = {"job_id": "j", "host": "h", "rank": 0, "world_size": 1, "step": 0, "step_ms": 1.0}
    assert StepTiming.model_validate({**base, "digest": -(2**63)}).digest == -(2**63)
    with pytest.raises(ValueError):
        StepTiming.model_validate({**base, "digest": 2**63})
    assert dg.rendered(2**64 - 1) == -1 and dg.rendered(torch.tensor(5)) == 5
