"""The hang watchdog: calibration, one dump per stall, and never a blocked or crashed training loop."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from vigil.collector.flightrec import parse_dump, to_trace
from vigil.timer import HangConfig, SpoolConfig, StepTimer, TimerConfig
from vigil.timer.watchdog import HangWatchdog

pytestmark = pytest.mark.pure


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def fake_dump(timeout_ms: int = 30_000) -> bytes:
    return json.dumps({"version": "2.10", "pg_status": {}, "entries": [
        {"record_id": 0, "pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": 1,
         "profiling_name": "gloo:all_reduce", "timeout_ms": timeout_ms, "retired": False}]}).encode()


def watchdog(tmp_path: Path, clock: Clock, dump: object = fake_dump, **cfg: object) -> HangWatchdog:
    config = HangConfig(dump_prefix=str(tmp_path / "fr" / "trace_"), poll_s=3600, **cfg)  # type: ignore[arg-type]
    return HangWatchdog(config, rank=lambda: 3, dump=dump, groups=lambda: {"0": [0, 1, 2, 3]},  # type: ignore[arg-type]
                        ready=lambda: True, clock=clock)


def test_timeout_calibrates_on_steady_steps_and_is_capped_by_the_group_timeout(tmp_path: Path) -> None:
    clock = Clock()
    wd = watchdog(tmp_path, clock, lambda: fake_dump(timeout_ms=8_000), factor=5.0, floor_s=2.0, warmup_steps=2)
    assert wd.timeout_s is None  # nothing to watch before the first step
    wd.beat(0)
    assert wd.timeout_s == 2.0  # the floor until intervals are known
    clock.t += 30.0  # a slow warm-up step (compile, first allocations) does not count once warm-up is over
    wd.beat(1)
    assert wd.timeout_s == 150.0
    for step in range(2, 6):
        clock.t += 0.5
        wd.beat(step)
    assert wd.timeout_s == 2.5  # 5 x 0.5 s
    clock.t += 0.1
    assert not wd.check()  # the first look past warm-up reads the group timeout from the trace
    assert wd.timeout_s == 2.5
    for step in range(6, 9):
        clock.t += 1.0
        wd.beat(step)
    assert wd.timeout_s == 4.0  # 5 x 1 s capped at half the 8 s process-group timeout
    assert HangWatchdog(HangConfig(timeout_s=7.0), rank=lambda: 0).timeout_s == 7.0


def test_one_dump_per_stall_with_the_ranks_groups_step_and_stack(tmp_path: Path) -> None:
    clock = Clock()
    wd = watchdog(tmp_path, clock, floor_s=3.0, warmup_steps=0)
    wd.beat(41)
    clock.t += 2.9
    assert not wd.check()
    clock.t += 0.2
    assert wd.check() and not wd.check()  # once per stall
    clock.t += 100
    assert not wd.check()
    doc = json.loads((tmp_path / "fr" / "trace_3").read_text())
    assert doc["rank"] == 3 and doc["entries"][0]["profiling_name"] == "gloo:all_reduce"
    v = doc["vigil"]
    assert (v["trigger"], v["step"], v["group_ranks"]) == ("watchdog", 41, {"0": [0, 1, 2, 3]})
    assert "test_one_dump_per_stall" in v["stack"]  # where the "training" thread was: this test
    assert not list((tmp_path / "fr").glob("*.tmp"))
    wd.beat(42)  # progress re-arms it
    clock.t += 3.5
    assert wd.check() and wd.dumps == 2
    trace = to_trace(parse_dump((tmp_path / "fr" / "trace_3").read_bytes()), job_id="j", host="h", rank=3)
    assert trace.group_ranks == {"0": [0, 1, 2, 3]} and trace.step == 42 and trace.trigger == "watchdog"


def test_a_failing_dump_or_an_unwritable_directory_is_counted_never_raised(tmp_path: Path) -> None:
    clock = Clock()

    def broken() -> bytes:
        raise RuntimeError("flight recorder exploded")

    wd = watchdog(tmp_path, clock, broken, floor_s=1.0, warmup_steps=0)
    wd.beat(0)
    clock.t += 5
    wd.check()  # the group-timeout probe and the dump both fail
    assert (wd.dumps, wd.failures) == (0, 2) and "exploded" in wd.last_error
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")  # even root cannot create a directory below a file
    wd2 = HangWatchdog(HangConfig(dump_prefix=str(blocker / "sub" / "t_"), floor_s=1.0, warmup_steps=0),
                       rank=lambda: 0, dump=fake_dump, groups=dict, ready=lambda: True, clock=clock)
    wd2.beat(0)
    clock.t += 5
    wd2.check()
    assert (wd2.dumps, wd2.failures) == (0, 1) and "Error" in wd2.last_error


def test_training_goes_on_while_the_dump_hangs_or_fails(tmp_path: Path) -> None:
    """A real StepTimer whose watchdog thread is stuck in its dump: steps keep coming, nothing raises."""
    entered, release = threading.Event(), threading.Event()

    def stuck_dump() -> bytes:
        entered.set()
        release.wait(60)
        raise RuntimeError("gave up")

    t = StepTimer(TimerConfig(device="cpu", job_id="wd", host="h", rank=0, world_size=1,
                              spool=SpoolConfig(directory=tmp_path / "spool"),
                              hang=HangConfig(timeout_s=1.0, poll_s=0.05, dump_prefix=str(tmp_path / "fr" / "t_"))))
    assert t.watchdog is not None
    t.watchdog._dump, t.watchdog._ready = stuck_dump, lambda: True
    with t.step():
        pass
    assert entered.wait(30), "the watchdog never fired"
    started = time.monotonic()
    for _ in range(50):  # the training thread never waits for the watchdog
        with t.step(), t.phase("forward"):
            pass
    assert time.monotonic() - started < 5
    release.set()
    t.close()
    assert t.written == 51 and t.watchdog.failures == 1


@pytest.mark.slow
def test_a_real_gloo_dump_names_the_groups(tmp_path: Path) -> None:
    import torch
    import torch.distributed as dist

    from vigil.timer.watchdog import torch_dump, torch_groups

    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        sub = dist.new_group([0], group_desc="dp_a")
        dist.all_reduce(torch.ones(4))
        dist.all_reduce(torch.ones(2), group=sub)
        clock = Clock()
        wd = HangWatchdog(HangConfig(dump_prefix=str(tmp_path / "nccl_trace_rank_"), floor_s=1.0, warmup_steps=0),
                          rank=lambda: 0, dump=torch_dump, groups=torch_groups, clock=clock)
        wd.beat(7)
        clock.t += 2
        assert wd.check(), wd.last_error
    finally:
        dist.destroy_process_group()
    trace = to_trace(parse_dump((tmp_path / "nccl_trace_rank_0").read_bytes()), job_id="j", host="h", rank=0)
    assert trace.group_ranks == {"0": [0], "1": [0]}  # keyed like the entries' process_group names
    ops = [(e.model_dump().get("process_group"), e.profiling_name) for e in trace.entries]
    assert ops[-2:] == [(["0", "default_pg"], "gloo:all_reduce"), (["1", "dp_a"], "gloo:all_reduce")]
    assert trace.step == 7
