"""Launch the ranks of a `ckpt_worker.py` scenario as real processes and collect what they report."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WORKER = Path(__file__).with_name("ckpt_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(scenario: str, world: int, work: Path, *extra: str) -> list[subprocess.Popen[bytes]]:
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "VIGIL_JOB_ID": "ckpt-test",
           "VIGIL_HOST": "test-host"}  # fmt: skip
    port = str(free_port())
    procs = []
    for rank in range(world):
        with open(work / f"log-rank{rank}.txt", "wb") as log:
            cmd = [sys.executable, str(WORKER), scenario, str(rank), str(world), port, str(work), *extra]
            procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
    return procs


def logs(work: Path, world: int) -> str:
    return "\n".join(
        f"--- rank {r} ---\n{(work / f'log-rank{r}.txt').read_text(errors='replace')[-3000:]}"
        for r in range(world)
    )


def run(scenario: str, world: int, work: Path, *extra: str, timeout: float = 150) -> list[dict[str, Any]]:
    """Run all ranks to completion; their reports, rank order. Fails with the ranks' logs."""
    procs = launch(scenario, world, work, *extra)
    deadline = time.monotonic() + timeout
    try:
        codes = [p.wait(max(0.1, deadline - time.monotonic())) for p in procs]
    except subprocess.TimeoutExpired:
        kill(procs)
        raise AssertionError(f"{scenario} timed out after {timeout} s\n{logs(work, world)}") from None
    assert codes == [0] * world, f"{scenario} exit codes {codes}\n{logs(work, world)}"
    return [json.loads((work / f"result-rank{r}.json").read_text()) for r in range(world)]


def kill(procs: list[subprocess.Popen[bytes]]) -> list[int]:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
    return [p.wait(30) for p in procs]


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
