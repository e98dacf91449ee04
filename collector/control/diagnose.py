"""Running a `diagnose` command: the agent's own installed diagnostics, as a child with a time limit.

A command carries typed parameters (`DiagnoseParams`: which checks, sizes, peers, time limit),
never a program: the agent builds the argv of its installed `python -m vigil.recovery.diagnostics`
with this interpreter (`diagnostics_argv`), runs it in a session of its own with its own
environment plus the job's identity, kills the whole session at the time limit or when the agent leaves (no
diagnostics outlive their agent: `stop`), and ships every
line of its stdout that is a valid `diagnostic` event of this job and host. Other lines are
kept as the run's output tail. With a warm child waiting (`collector.control.warmdiag`), the same
arguments and identity go to it instead of a new interpreter.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field

from vigil.collector.control.warmdiag import SAFE_CWD, SAFE_PYTHON, SERVE, WarmDiagnostics
from vigil.contract import Command, DiagnoseParams, Diagnostic, Event, validate_event
from vigil.trainside import env

TAIL_CHARS = 2000
STOP_POLL_S = 0.5  # how soon a running diagnostics child is stopped once its agent leaves


@dataclass(kw_only=True)
class DiagnosticRun:
    events: list[Event] = field(default_factory=list)
    returncode: int | None = None
    timed_out: bool = False
    seconds: float = 0.0
    rejected: int = 0
    tail: str = ""
    warm: bool = False  # it ran in the agent's warm child (collector.control.warmdiag)
    stopped: bool = False  # killed because the agent was leaving

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.stopped

    def error(self) -> str:
        if self.stopped:
            return f"stopped after {self.seconds:.1f} s: the agent is leaving"
        if self.timed_out:
            return f"timed out after {self.seconds:.1f} s"
        if self.returncode != 0:
            last = self.tail.strip().splitlines()[-1:] or [""]
            return f"exited with {self.returncode}: {last[0][:300]}"
        return ""


def diagnostics_argv(p: DiagnoseParams) -> list[str]:
    """The argv of this installation's diagnostics for `p` (every value typed and bounded by the contract)."""
    return [*SAFE_PYTHON, "-m", "vigil.recovery.diagnostics", "--checks", ",".join(c.value for c in p.checks),
            "--round", str(p.round), "--group", ",".join(p.group), "--rank", str(p.rank),
            "--master-addr", p.master_addr, "--master-port", str(p.master_port),
            "--timeout", str(p.check_timeout_s), "--gemm-size", str(p.gemm_size), "--gemm-iters", str(p.gemm_iters),
            "--alltoall-procs", str(p.alltoall_procs), "--allreduce-mb", str(p.allreduce_mb),
            "--allreduce-iters", str(p.allreduce_iters)]


def run_diagnostics(command: Command, *, job_id: str, host: str, base_env: dict[str, str],
                    warm: WarmDiagnostics | None = None, stop: threading.Event | None = None) -> DiagnosticRun:
    """Run the diagnostics `command` orders, in `warm`'s waiting child when it has one, else a new one. Once `stop`
    is set (the agent is leaving) the child's process group is killed: no diagnostics outlive their agent."""
    assert command.diagnose is not None  # the contract requires it of a diagnose command
    argv = diagnostics_argv(command.diagnose)
    identity = {env.JOB_ID: job_id, env.HOST: host, env.COMMAND_ID: command.command_id,
                env.INCIDENT_ID: command.incident_id}
    run = DiagnosticRun()
    if stop is not None and stop.is_set():  # the agent is leaving: nothing started, the warm child left waiting
        run.stopped = True
        return run
    proc = warm.take(argv[len(SERVE) - 1:], identity) if warm is not None else None
    run.warm = proc is not None
    try:
        return _run(proc, argv, {**base_env, **identity}, command.timeout_s, run, job_id=job_id, host=host,
                    stop=stop or threading.Event())
    finally:
        if warm is not None:
            warm.refill()  # the next child, once this round is over


def _run(proc: subprocess.Popen[bytes] | None, argv: list[str], env: dict[str, str], timeout_s: float,
         run: DiagnosticRun, *, job_id: str, host: str, stop: threading.Event) -> DiagnosticRun:
    started = time.monotonic()
    try:
        if proc is None:
            proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, cwd=SAFE_CWD,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        run.returncode, run.tail = 127, f"cannot start {argv[0]!r}: {exc.strerror or exc}"
        return run
    deadline = started + timeout_s
    while True:  # in slices, so the agent's exit is seen (communicate keeps what it read across retries)
        try:
            out, _ = proc.communicate(timeout=max(0.0, min(STOP_POLL_S, deadline - time.monotonic())))
            break
        except subprocess.TimeoutExpired:
            if not stop.is_set() and time.monotonic() < deadline:
                continue
            stopped = stop.is_set()  # read once: a run is stopped or timed out, never both
            run.timed_out, run.stopped = not stopped, stopped
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, _ = proc.communicate()
            break
    run.seconds = time.monotonic() - started
    run.returncode = proc.returncode
    other: list[str] = []
    for line in out.decode("utf-8", "replace").splitlines():
        event = _event(line, job_id=job_id, host=host)
        if event is not None:
            run.events.append(event)
        else:
            if line.startswith("{"):
                run.rejected += 1
            other.append(line)
    run.tail = "\n".join(other)[-TAIL_CHARS:]
    return run


def _event(line: str, *, job_id: str, host: str) -> Event | None:
    if not line.startswith("{"):
        return None
    try:
        doc = json.loads(line)
        event = validate_event(str(doc.get("kind")), doc)
    except (ValueError, AttributeError):
        return None
    if not isinstance(event, Diagnostic) or event.job_id != job_id or event.host != host:
        return None
    return event
