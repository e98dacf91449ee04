"""Running a `diagnose` command: the argv it carries, as a child with a time limit.

The agent knows nothing of the diagnostics themselves (they are the recovery component's:
`python -m vigil.recovery.diagnostics ...`): it runs the command's argv (`{python}` is this
interpreter) in a session of its own with the job's identity in the environment, kills the
whole session at the time limit, and ships every line of its stdout that is a valid
`diagnostic` event of this job and host. Other lines are kept as the run's output tail.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from vigil.contract import Command, Diagnostic, Event, validate_event

TAIL_CHARS = 2000


@dataclass(kw_only=True)
class DiagnosticRun:
    events: list[Event] = field(default_factory=list)
    returncode: int | None = None
    timed_out: bool = False
    seconds: float = 0.0
    rejected: int = 0
    tail: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def error(self) -> str:
        if self.timed_out:
            return f"timed out after {self.seconds:.1f} s"
        if self.returncode != 0:
            last = self.tail.strip().splitlines()[-1:] or [""]
            return f"exited with {self.returncode}: {last[0][:300]}"
        return ""


def run_diagnostics(command: Command, *, job_id: str, host: str, base_env: dict[str, str]) -> DiagnosticRun:
    argv = [sys.executable if a == "{python}" else a for a in command.argv]
    env = {**base_env, **command.env, "VIGIL_JOB_ID": job_id, "VIGIL_HOST": host,
           "VIGIL_COMMAND_ID": command.command_id, "VIGIL_INCIDENT_ID": command.incident_id}
    run = DiagnosticRun()
    started = time.monotonic()
    try:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        run.returncode, run.tail = 127, f"cannot start {argv[0]!r}: {exc.strerror or exc}"
        return run
    try:
        out, _ = proc.communicate(timeout=command.timeout_s)
    except subprocess.TimeoutExpired:
        run.timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = proc.communicate()
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
