"""A real 2-rank PyTorch training under `vigil run -- torchrun`: step records of both ranks on Kafka."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.agent_harness import agent_env, read_events
from tests.support.waiting import wait_until
from vigil.contract import ProcessExit, StepTiming
from vigil.kafka.broker import free_port
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
TRAIN = Path(__file__).with_name("train_ddp.py")


def torchrun(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vigil", "run", "--host", "demo-host-0", "--job", "ddp", "--",
         sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
         str(TRAIN)],
        env=env, capture_output=True, text=True, timeout=240,
    )


def test_two_rank_training_steps_reach_kafka(topics: VigilSettings, broker_bootstrap: str, tmp_path: Path) -> None:
    env = agent_env(topics, broker_bootstrap, tmp_path / "home", TRAIN_STEPS="8", OMP_NUM_THREADS="1")
    done = torchrun(env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 0 done" in done.stdout and "rank 1 done" in done.stdout

    def steps() -> list[StepTiming]:
        return [e for e in read_events(topics, broker_bootstrap, ["steps"]) if isinstance(e, StepTiming)]

    wait_until(lambda: len(steps()) >= 16, 60, "16 step records")  # delivered before exit; read side may lag
    got = steps()
    assert {(e.rank, e.step) for e in got} == {(r, s) for r in (0, 1) for s in range(8)}
    for e in got:
        assert (e.job_id, e.host, e.world_size) == ("ddp", "demo-host-0", 2)
        assert set(e.phases) == {"data", "forward", "backward", "optimizer"}
        assert e.coords.dp == e.rank and e.coords.tp == 0 and e.coords.pp == 0
        assert e.step_ms >= sum(e.phases.values()) * 0.5
    exits = [e for e in read_events(topics, broker_bootstrap, ["logs"]) if isinstance(e, ProcessExit)]
    assert sorted((e.rank if e.rank is not None else -1, e.exit_code, e.launcher) for e in exits) == [
        (-1, 0, True), (0, 0, False), (1, 0, False)]


def test_failing_rank_is_named_in_the_exit_summary(topics: VigilSettings, broker_bootstrap: str, tmp_path: Path) -> None:
    env = agent_env(topics, broker_bootstrap, tmp_path / "home", TRAIN_STEPS="50", TRAIN_FAIL_RANK="1",
                    OMP_NUM_THREADS="1")
    done = torchrun(env)
    assert done.returncode == 1, done.stderr[-3000:]  # torchrun's own code when a worker failed
    exits = [e for e in read_events(topics, broker_bootstrap, ["logs"]) if isinstance(e, ProcessExit)]
    # one per rank process, each with its own error, and one for torchrun (not a rank) naming the first failure
    ranks = {e.rank: e for e in exits if not e.launcher}
    (launcher,) = [e for e in exits if e.launcher]
    assert set(ranks) == {0, 1} and len({e.pid for e in exits}) == 3
    failed = ranks[1]
    assert (failed.local_rank, failed.exit_code) == (1, 1)
    assert failed.summary == "RuntimeError: injected failure on rank 1"
    assert "Traceback (most recent call last)" in failed.traceback and failed.failed_at is not None
    assert "injected failure" not in ranks[0].summary  # the peer's own error (or none), never the culprit's
    assert launcher.rank is None and launcher.exit_code == 1
    assert launcher.summary == "rank 1 (local rank 1) failed first: RuntimeError: injected failure on rank 1"
