"""Warm diagnostics (collector.control.warmdiag): a `diagnose` runs in the child the agent started ahead, torch imported.

Real processes: the agent's own `python -m vigil.recovery.diagnostics --serve` child, ordered through its
stdin, runs the checks and prints the same `diagnostic` events as a cold run; one that died waiting, or none
prepared, means a cold run; closing the pool leaves no process behind. (The time it saves is a bench figure:
bench/recovery_time.py's diagnose column.)
"""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime

import psutil
import pytest

from tests.support.waiting import wait_until
from vigil.collector.control.diagnose import DiagnosticRun, run_diagnostics
from vigil.collector.control.warmdiag import WarmDiagnostics
from vigil.contract import Command, DiagnoseParams, Diagnostic

pytestmark = pytest.mark.timeout(180)


def command() -> Command:
    params = DiagnoseParams(group=["h0"], rank=0, master_addr="127.0.0.1", master_port=29400,
                            checks=["gemm", "alltoall"], gemm_size=64, gemm_iters=5)  # type: ignore[list-item]
    return Command(job_id="j", host="h0", ts=datetime.now(UTC), action="diagnose",
                   command_id="j/diag/r1/h0", incident_id="j/inc", timeout_s=120, diagnose=params)


def checked(run: DiagnosticRun) -> None:
    assert run.ok, run.tail
    tests = {e.test: e for e in run.events if isinstance(e, Diagnostic)}
    assert set(tests) == {"gemm", "alltoall", "check"} and tests["check"].ok
    assert all(e.job_id == "j" and e.host == "h0" and e.command_id == "j/diag/r1/h0" and e.incident_id == "j/inc"
               for e in tests.values())  # the identity the order carried, not the child's start environment
    assert tests["gemm"].values["gemm_gflops"] > 0


def test_a_diagnose_runs_in_the_child_started_ahead_and_the_next_one_is_started() -> None:
    warm = WarmDiagnostics(env=dict(os.environ), refill_delay_s=0.0)
    try:
        warm.prepare()
        waiting = warm._proc
        assert waiting is not None
        run = run_diagnostics(command(), job_id="j", host="h0", base_env=dict(os.environ), warm=warm)
        checked(run)
        assert run.warm and waiting.returncode == 0  # that very child ran it and exited
        wait_until(lambda: warm._proc is not None and warm._proc.pid != waiting.pid, 30, "the next warm child")
    finally:
        warm.close()


def test_a_child_that_died_waiting_means_a_cold_run_and_close_leaves_nothing() -> None:
    warm = WarmDiagnostics(env=dict(os.environ), refill_delay_s=60.0)
    warm.prepare()
    waiting = warm._proc
    assert waiting is not None
    waiting.kill()
    waiting.wait()
    run = run_diagnostics(command(), job_id="j", host="h0", base_env=dict(os.environ), warm=warm)
    checked(run)
    assert not run.warm
    warm.prepare()  # the refill (60 s away) started now
    idle = warm._proc
    assert idle is not None
    warm.close()
    assert idle.poll() is not None and not psutil.pid_exists(idle.pid)  # stopped and reaped
    warm.prepare()  # closed: nothing starts
    assert warm._proc is None


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_diagnose_running_when_its_agent_leaves_is_stopped_with_its_process_group(warm: bool) -> None:
    """The agent's exit (`stop`, the supervisor's exit event) kills a round still running, in a cold child or in the
    warm one it was handed: no diagnostics outlive their agent (a demo stopped during a round left one behind)."""
    stop = threading.Event()
    pool = WarmDiagnostics(env=dict(os.environ), refill_delay_s=60.0) if warm else None

    def running() -> list[psutil.Process]:  # this test's own diagnostics children (not another session's)
        return [p for p in psutil.Process().children(recursive=True)
                if "vigil.recovery.diagnostics" in (p.cmdline() if p.is_running() else [])]

    try:
        waiting = None
        if pool is not None:
            pool.prepare()
            waiting = pool._proc
            assert waiting is not None
        result: list[DiagnosticRun] = []
        worker = threading.Thread(target=lambda: result.append(run_diagnostics(
            command(), job_id="j", host="h0", base_env=dict(os.environ), warm=pool, stop=stop)))
        worker.start()
        if pool is not None:
            wait_until(lambda: pool._proc is None, 30, "the warm child taken for the round")
        else:
            wait_until(lambda: bool(running()), 30, "the diagnostics child")
        child = waiting.pid if waiting is not None else running()[0].pid
        stop.set()
        worker.join(60)
        assert not worker.is_alive() and result
        run = result[0]
        assert run.warm == warm
        assert run.stopped and not run.timed_out and not run.ok and "the agent is leaving" in run.error()
        assert not psutil.pid_exists(child) and running() == []
        late = run_diagnostics(command(), job_id="j", host="h0", base_env=dict(os.environ), warm=pool, stop=stop)
        assert late.stopped and not late.events and running() == []  # none starts once the agent is leaving
    finally:
        if pool is not None:
            pool.close()
