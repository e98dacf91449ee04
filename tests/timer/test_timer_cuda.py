"""The CUDA event path: sync-free timing, deferred emission, bounded pending steps."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support.waiting import wait_until
from tests.timer.timer_testutil import read_records, timer_config
from vigil.timer import StepTimer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.fixture(autouse=True)
def forbid_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    """The timer must never synchronise, nor read an event before it completed."""

    def forbidden(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the timer synchronised")

    real_elapsed: Callable[[Any, Any], float] = torch.cuda.Event.elapsed_time

    def checked(self: Any, end: Any) -> float:
        assert self.query() and end.query(), "elapsed_time before both events completed"
        return real_elapsed(self, end)

    monkeypatch.setattr(torch.cuda, "synchronize", forbidden)
    monkeypatch.setattr(torch.cuda.Event, "synchronize", forbidden)
    monkeypatch.setattr(torch.cuda.Event, "elapsed_time", checked)


def test_cuda_events_time_steps_and_phases(tmp_path: Path) -> None:
    from vigil.contract.telemetry import StepTiming

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    t = StepTimer(timer_config(spool_dir=tmp_path, job_id="j", host="h", flops_per_step=4 * 2 * 4096**3))
    for _ in range(10):
        with t.step(tokens=4096):
            with t.phase("forward"):
                b = a @ a
                b = b @ a
            with t.phase("backward"):
                c = b @ a
                c = c @ a
    t.close(timeout=30)
    recs = read_records(tmp_path)
    assert [r["step"] for r in recs] == list(range(10))
    for r in recs:
        StepTiming.model_validate(r)
        assert r["phases"]["forward"] > 0 and r["phases"]["backward"] > 0
        assert r["step_ms"] >= 0.9 * (r["phases"]["forward"] + r["phases"]["backward"])
        assert r["phases"]["_host"] > 0
        assert r["tflops"] is not None and r["tflops"] > 0
    del c


def test_steps_are_emitted_by_the_background_poller(tmp_path: Path) -> None:
    t = StepTimer(timer_config(spool_dir=tmp_path, job_id="j", host="h", flush_interval_s=0.05))
    with t.step(), t.phase("busy"):
        # keeps the GPU busy well after the step exits on the host
        torch.cuda._sleep(int(1e9))  # type: ignore[no-untyped-call]
    assert t.written == 0  # not emitted yet: the events have not completed
    # no further step boundary and no flush: the spool thread polls the events
    wait_until(lambda: t.written == 1, 10, 'the record to be written', 0.005)
    (rec,) = read_records(tmp_path)
    assert rec["phases"]["busy"] > rec["phases"]["_host"]  # device time, not host launch time
    t.close()


def test_too_many_pending_steps_drop_the_oldest(tmp_path: Path) -> None:
    t = StepTimer(timer_config(spool_dir=tmp_path, job_id="j", host="h", max_pending=2, flush_interval_s=3600))
    for _ in range(8):
        with t.step():
            torch.cuda._sleep(int(5e7))  # type: ignore[no-untyped-call]
    assert t.dropped >= 1
    t.close(timeout=30)
    recs = read_records(tmp_path)
    assert len(recs) + t.dropped == 8
    assert recs[0]["dropped"] == t.dropped
    assert [r["step"] for r in recs] == list(range(8 - len(recs), 8))
