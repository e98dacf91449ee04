"""A real job restarted warm: after a crash the ranks run in interpreters the agents started (torch imported)
before the start command, and the job resumes from its checkpoint as it does cold (collector.control.warm)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.live import Live
from vigil.contract import Command, Incident, Member, Outcome, ProcessExit, RankRef
from vigil.recovery.controller.state import ClusterState
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]
PROBE = re.compile(r"\[warm-probe\] rank=(\d+) torch_at_entry=(\w+) started=([\d.]+) pid=(\d+)")


@pytest.fixture
def live(topics: VigilSettings, broker_bootstrap: str, tmp_path: Path) -> Iterator[Live]:
    setup = Live(settings=topics, bootstrap=broker_bootstrap, tmp=tmp_path)
    try:
        yield setup
    finally:
        setup.close()


def training(job: str, generation: int) -> Callable[[ClusterState], bool]:
    def check(s: ClusterState) -> bool:
        j = s.jobs.get(job)
        return j is not None and j.generation == generation and len(j.world) == 2 and all(
            (m := j.members.get(h)) is not None and m.generation == generation and m.state == "training"
            for h in j.world)
    return check


def test_a_crashed_job_restarts_in_prewarmed_interpreters_and_resumes_from_its_checkpoint(live: Live) -> None:
    job = "job-warm"
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1",
            str(Path(__file__).with_name("warm_job.py")), "--ckpt", str(live.tmp / "ckpt"), "--fault", "crash",
            "--fault-host", "h1", "--fault-step", "7", "--once", str(live.tmp / "crash.once")]
    for h in ("h0", "h1"):
        live.start_agent(h, argv, nodes="2:2", job=job, env={"VIGIL_WARM_START": "true"})
    live.start_controller()
    # generation 1 crashes at step 7, ~0.7 s after its first: its training is awaited in the agents' reports, not
    # in the folded state, which may have moved on to the crash when it is polled. An agent whose rank crashed
    # before its control loop saw the first step never says "training"; its report of the exit carries the first
    # step instead (CI, loaded: both ranks died between two ticks)
    live.wait_for(lambda _s: {e.host for e in live.events if isinstance(e, Member) and e.job_id == job
                              and e.generation == 1 and e.first_step is not None} == {"h0", "h1"},
                  300, "the job to train")

    def crashes(_s: ClusterState) -> list[ProcessExit]:
        return [e for e in live.events if isinstance(e, ProcessExit) and e.host == "h1" and not e.launcher
                and "ValueError" in e.summary]

    live.wait_for(crashes, 120, "the crash")
    exit_ = crashes(live.state)[0]
    assert (exit_.rank, exit_.local_rank, exit_.exit_code) == (1, 0, 1)  # reported as under torchrun
    inc = Incident(job_id=job, host="h1", incident_id=f"{job}/crash_cascade/h1", category="crash_cascade",
                   cause="software", status="open", severity="critical", summary=exit_.summary,
                   culprits=[RankRef(host="h1", rank=1, message=exit_.summary)], first_sign=exit_.ts,
                   detected=datetime.now(UTC))
    live.publish([inc])

    def recovered(s: ClusterState) -> list[Outcome]:  # our incident's case, or the one the exit opened first
        return [c.outcome for cid, c in s.cases.items() if c.job_id == job and "/start/" not in cid
                and c.outcome is not None]

    live.wait_for(recovered, 300, "the recovery to end")
    (out,) = recovered(live.state)
    assert out.result == "resumed", out
    assert out.checkpoint_step == 5 and out.first_step == 6 and out.hosts == ["h0", "h1"]
    live.wait_for(training(job, 2), 120, "generation 2 to train")

    starts = {e.host: e.ts.timestamp() for e in live.events if isinstance(e, Command) and e.action == "start"
              and e.generation == 2}
    for host in ("h0", "h1"):
        probes = PROBE.findall((live.tmp / f"agent-{host}.log").read_text())
        assert len(probes) >= 2, probes  # generation 1, generation 2
        _rank, torch_at_entry, started, _pid = probes[-1]
        assert torch_at_entry == "True"  # the entry point found torch imported: a warm interpreter
        assert float(started) < starts[host]  # started before the start command of generation 2
