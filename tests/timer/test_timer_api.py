"""StepTimer behaviour on the host clock: steps, phases, nesting, failures, decorators."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from tests.timer.timer_testutil import read_records, timer_config
from vigil.timer import StepTimer

pytestmark = pytest.mark.pure


def make(tmp_path: Path, **kw: object) -> StepTimer:
    return StepTimer(timer_config(spool_dir=tmp_path, device="cpu", job_id="j", host="h", rank=0, world_size=1, **kw))  # type: ignore[arg-type]


def test_step_and_phase_durations_are_measured(tmp_path: Path) -> None:
    t = make(tmp_path)
    with t.step(tokens=128, samples=4):
        with t.phase("forward"):
            time.sleep(0.02)
        with t.phase("backward"):
            time.sleep(0.03)
    t.close()
    (rec,) = read_records(tmp_path)
    assert rec["step"] == 0
    assert rec["phases"]["forward"] >= 19.0
    assert rec["phases"]["backward"] >= 29.0
    assert rec["step_ms"] >= rec["phases"]["forward"] + rec["phases"]["backward"]
    assert (rec["tokens"], rec["samples"], rec["failed"], rec["dropped"]) == (128, 4, False, 0)
    assert abs(rec["ts"] - time.time()) < 60


def test_nested_phases_use_paths_and_repeats_are_summed(tmp_path: Path) -> None:
    t = make(tmp_path)
    with t.step():
        for _ in range(3):  # micro-batches
            with t.phase("backward"), t.phase("allreduce"):
                time.sleep(0.01)
    t.close()
    (rec,) = read_records(tmp_path)
    assert set(rec["phases"]) == {"backward", "backward/allreduce"}
    assert rec["phases"]["backward/allreduce"] >= 29.0
    assert rec["phases"]["backward"] >= rec["phases"]["backward/allreduce"]


def test_steps_are_numbered_and_explicit_number_continues(tmp_path: Path) -> None:
    t = make(tmp_path, start_step=10)
    for _ in range(2):
        with t.step():
            pass
    with t.step(step=100):
        pass
    with t.step():
        pass
    t.close()
    assert [r["step"] for r in read_records(tmp_path)] == [10, 11, 100, 101]


def test_exception_in_phase_closes_it_marks_failed_and_propagates_unchanged(tmp_path: Path) -> None:
    t = make(tmp_path)
    boom = ValueError("boom")
    with pytest.raises(ValueError) as caught, t.step(tokens=5), t.phase("forward"):
        time.sleep(0.01)
        raise boom
    assert caught.value is boom
    with t.step(), t.phase("forward"):  # the next step is clean: the phase stack was unwound
        pass
    t.close()
    failed, ok = read_records(tmp_path)
    assert failed["failed"] is True and ok["failed"] is False
    assert failed["phases"]["forward"] >= 9.0
    assert failed["tflops"] is None
    assert set(ok["phases"]) == {"forward"}


def test_exception_in_step_body_marks_failed(tmp_path: Path) -> None:
    t = make(tmp_path)
    with pytest.raises(KeyError), t.step():
        raise KeyError("x")
    t.close()
    assert read_records(tmp_path)[0]["failed"] is True


def test_phases_outside_a_step_attach_to_the_next_step(tmp_path: Path) -> None:
    t = make(tmp_path)
    with t.phase("data"):
        time.sleep(0.02)
    with t.step(), t.phase("forward"):
        pass
    with pytest.raises(StopIteration), t.phase("data"):  # end of epoch: marks nothing
        raise StopIteration
    with t.step():
        pass
    t.close()
    first, second = read_records(tmp_path)
    assert first["phases"]["data"] >= 19.0
    assert first["step_ms"] < first["phases"]["data"] + 1000  # sanity: record is about this step
    assert second["failed"] is False and "data" in second["phases"]


def test_nested_step_is_a_noop(tmp_path: Path) -> None:
    t = make(tmp_path)
    with t.step() as outer, t.step() as inner:
        assert inner is outer
    t.close()
    assert len(read_records(tmp_path)) == 1


def test_decorators_time_phases_and_steps(tmp_path: Path) -> None:
    t = make(tmp_path)

    @t.timed("optimizer")
    def opt_step(x: int) -> int:
        time.sleep(0.01)
        return x + 1

    @t.timed
    def forward() -> None:
        time.sleep(0.01)

    @t.timed_step(samples=8)
    def train_step(i: int) -> int:
        forward()
        t.annotate(tokens=100 + i)
        return opt_step(i)

    @t.timed_step
    def bare_step() -> str:
        return "ok"

    assert train_step.__name__ == "train_step"
    assert [train_step(i) for i in range(2)] == [1, 2]
    assert bare_step() == "ok"
    t.close()
    recs = read_records(tmp_path)
    assert len(recs) == 3
    assert recs[0]["phases"]["optimizer"] >= 9.0 and recs[0]["phases"]["forward"] >= 9.0
    assert [r["tokens"] for r in recs] == [100, 101, None]
    assert recs[1]["samples"] == 8 and recs[2]["samples"] is None


def test_step_yields_a_handle_for_counts(tmp_path: Path) -> None:
    t = make(tmp_path)
    with t.step() as s:
        s.tokens = 77
        s.samples = 3
    t.close()
    rec = read_records(tmp_path)[0]
    assert (rec["tokens"], rec["samples"]) == (77, 3)


@pytest.mark.parametrize("how", ["arg", "env"])
def test_disabled_mode_writes_nothing_and_returns_functions_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    if how == "env":
        monkeypatch.setenv("VIGIL_TIMER", "0")
        t = StepTimer(timer_config(spool_dir=tmp_path, device="cpu"))
    else:
        t = StepTimer(timer_config(spool_dir=tmp_path, device="cpu", enabled=False))

    def f() -> int:
        return 1

    assert t.timed("x")(f) is f
    assert t.timed_step(f) is f
    assert t.phase("a") is t.phase("b")  # one shared no-op object
    with t.step(tokens=1) as s, t.phase("forward"):
        s.tokens = 5
    t.close()
    assert list(tmp_path.rglob("*")) == []
    assert t.written == 0 and t.spool_path is None


def test_phases_inside_torch_compile_are_noops(tmp_path: Path) -> None:
    t = make(tmp_path)

    def f(x: torch.Tensor) -> torch.Tensor:
        with t.phase("inside"):
            y = x.sin() * 2
        return y.cos()

    compiled = torch.compile(f, backend="eager", fullgraph=True)
    x = torch.randn(8)
    with t.step():
        out = compiled(x)
    t.close()
    assert torch.allclose(out, f(x))
    (rec,) = read_records(tmp_path)
    assert "inside" not in rec["phases"]


def test_close_is_final_and_idempotent(tmp_path: Path) -> None:
    t = make(tmp_path)
    with t.step():
        pass
    t.close()
    t.close()
    with t.step(), t.phase("late"):
        pass
    assert len(read_records(tmp_path)) == 1


def test_context_manager_closes(tmp_path: Path) -> None:
    with make(tmp_path) as t, t.step():
        pass
    assert t.written == 1


def test_example_script_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from vigil.timer.example import main

    main(steps=3, spool_dir=str(tmp_path))
    recs = read_records(tmp_path)
    assert [r["step"] for r in recs] == [0, 1, 2]
    assert set(recs[0]["phases"]) == {"data", "forward", "backward", "optimizer"}
    assert recs[0]["tflops"] is not None and recs[0]["tokens"] == 64
    assert "3 records" in capsys.readouterr().out


def test_annotate_before_the_step_is_kept(tmp_path: Path) -> None:
    t = make(tmp_path)
    t.annotate(tokens=9, samples=2, flops=1e9)
    with t.step(samples=3):
        pass
    t.close()
    rec = read_records(tmp_path)[0]
    assert (rec["tokens"], rec["samples"]) == (9, 3) and rec["tflops"] is not None


def test_phase_kinds_are_recorded_where_declared_and_validated(tmp_path: Path) -> None:
    from vigil.contract import default_phase_kind
    from vigil.contract.telemetry import StepTiming

    t = make(tmp_path)

    @t.timed("exchange", kind="comm")
    def exchange() -> None:
        time.sleep(0.001)

    with t.step():
        with t.phase("forward"):
            pass
        with t.phase("backward"), t.phase("wait_peers", kind="wait"):
            pass
        exchange()
    with t.step(), t.phase("forward"):  # no declaration in this step: no key at all (lines stay as before)
        pass
    with pytest.raises(ValueError, match="phase kind must be one of compute, comm, wait"):
        t.phase("x", kind="network")
    with pytest.raises(ValueError, match="phase kind"):
        t.timed("x", kind="gpu")
    t.close()
    first, second = read_records(tmp_path)
    assert first["phase_kinds"] == {"backward/wait_peers": "wait", "exchange": "comm"}
    assert "phase_kinds" not in second
    assert StepTiming.model_validate(first).phase_kinds == {"backward/wait_peers": "wait", "exchange": "comm"}
    # undeclared phases are classified by name downstream
    assert [default_phase_kind(p) for p in ("forward", "grad_sync", "backward/allreduce", "bubble", "data")] == [
        "compute", "comm", "comm", "wait", "compute"]
