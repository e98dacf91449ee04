"""The CUDA-event logic driven by fake events, so it is tested on machines without a GPU.

The fake behaves like CUDA: `query()` is False until the fake GPU reaches the event,
and `elapsed_time` raises before both events completed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.waiting import wait_until
from tests.timer.timer_testutil import read_records, timer_config
from vigil.timer import StepTimer
from vigil.timer.clocks import CudaClock

pytestmark = pytest.mark.pure


class FakeGpu:
    def __init__(self) -> None:
        self.issued = 0
        self.completed = 0  # events with seq <= completed have run

    def finish_all(self) -> None:
        self.completed = self.issued


class FakeEvent:
    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu, self.seq = gpu, -1

    def record(self) -> None:
        self.gpu.issued += 1
        self.seq = self.gpu.issued

    def query(self) -> bool:
        return 0 <= self.seq <= self.gpu.completed

    def elapsed_time(self, end: FakeEvent) -> float:
        if not (self.query() and end.query()):
            raise RuntimeError("event not completed")  # what CUDA does
        return float(end.seq - self.seq)  # 1 ms of GPU time per event in between


def cuda_timer(tmp_path: Path, gpu: FakeGpu, **kw: Any) -> StepTimer:
    t = StepTimer(timer_config(spool_dir=tmp_path, device="cpu", job_id="j", host="h", **kw))
    t._clock = CudaClock(
        t._emit, t._drop, device=None, max_pending=kw.get("max_pending", 64),
        event_factory=lambda: FakeEvent(gpu), device_name="NVIDIA H100 80GB HBM3",
    )  # fmt: skip
    return t


def test_steps_wait_for_their_events_then_use_device_time(tmp_path: Path) -> None:
    gpu = FakeGpu()
    t = cuda_timer(tmp_path, gpu, flush_interval_s=3600, flops_per_step=1e12)
    with t.step():  # events: step start(1), fwd(2,3), bwd(4,5), step end(6)
        with t.phase("fwd"):
            pass
        with t.phase("bwd"):
            pass
    assert t.flush() and t.written == 0  # GPU has not run it: nothing emitted, nothing raised
    gpu.completed = 5  # all but the step's end event
    assert t.flush() and t.written == 0
    gpu.finish_all()
    assert t.flush() and t.written == 1
    t.close()
    (rec,) = read_records(tmp_path)
    assert rec["step_ms"] == 5.0
    assert rec["phases"]["fwd"] == 1.0 and rec["phases"]["bwd"] == 1.0
    assert rec["phases"]["_host"] >= 0.0
    assert rec["tflops"] == pytest.approx(1e12 / 0.005 / 1e12)
    assert rec["mfu"] == pytest.approx(rec["tflops"] / 989.0, rel=1e-4)  # H100 peak from the table


def test_pending_steps_are_bounded_oldest_dropped(tmp_path: Path) -> None:
    gpu = FakeGpu()
    t = cuda_timer(tmp_path, gpu, max_pending=2, flush_interval_s=3600)
    for _ in range(5):
        with t.step():
            pass
    assert t.dropped == 3 and t.written == 0
    gpu.finish_all()
    t.close()
    recs = read_records(tmp_path)
    assert [r["step"] for r in recs] == [3, 4]
    assert recs[0]["dropped"] == 3


def test_spool_thread_emits_without_further_steps(tmp_path: Path) -> None:
    gpu = FakeGpu()
    t = cuda_timer(tmp_path, gpu, flush_interval_s=0.02)
    with t.step():
        pass
    time.sleep(0.1)
    assert t.written == 0
    gpu.finish_all()  # the training thread is now "stuck" elsewhere: only the spool thread polls
    wait_until(lambda: t.written == 1, 10, 'the record to be written', 0.005)
    t.close()


def test_close_does_not_wait_forever_for_a_stuck_gpu(tmp_path: Path) -> None:
    gpu = FakeGpu()
    t = cuda_timer(tmp_path, gpu)
    with t.step():
        pass
    t.close(timeout=0.2)  # the GPU never completes: bounded, counted
    assert t.written == 0 and t.dropped == 1


def test_events_are_reused_after_completion(tmp_path: Path) -> None:
    gpu = FakeGpu()
    created: list[FakeEvent] = []

    def factory() -> FakeEvent:
        created.append(FakeEvent(gpu))
        return created[-1]

    t = StepTimer(timer_config(spool_dir=tmp_path, device="cpu", job_id="j", host="h", flush_interval_s=3600))
    t._clock = CudaClock(t._emit, t._drop, device=None, max_pending=8, event_factory=factory)
    for _ in range(10):
        with t.step(), t.phase("x"):
            pass
        gpu.finish_all()
    t.close()
    assert t.written == 10
    assert len(created) <= 8  # 4 events per step, recycled once complete
