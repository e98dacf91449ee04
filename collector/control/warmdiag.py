"""Warm diagnostics: the agent keeps the next diagnostics child started, torch imported, for a `diagnose`.

A diagnostics round starts `python -m vigil.recovery.diagnostics` on every host of the round when the
command comes, and an interpreter plus torch's import is most of its time: ~3.5 s of one core idle,
several times that when every host of a machine imports at once. `WarmDiagnostics.prepare` starts that
child ahead, in its `--serve` mode (a session of its own, the agent's environment for commands): it
imports torch and the checks, then waits for one line on its stdin. `take` hands it the command's
arguments (this installation's, `diagnose.diagnostics_argv`, typed by the contract) and the run's
identity as that line and returns it as the run's process: the agent reads, times and kills it as it
does a cold one. None ready, or one that died waiting: the run starts cold. The next child is started
`refill_delay_s` (30 s) after the round ends, so its import neither disturbs the round's measurements
nor competes with the rest of the recovery
(the restart that follows the round: a 5 s delay put 3 hosts' imports into it and stretched the
launch; a second round right after the first, for suspects, runs cold). Memory: one idle interpreter with torch per agent under `--nodes`.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vigil.collector.control.warm import IdleProcess

log = logging.getLogger(__name__)
SAFE_PYTHON = (sys.executable, "-P")
"""The diagnostics' interpreter: `-P`, no working directory (nor script directory) on `sys.path`. The agent may run as
root beside a job of another uid (`vigil run --user`) whose files sit in the directory it was started from: a module
planted there must never be imported by what runs as the agent (an attacker's review)."""
SAFE_CWD = "/"  # and they start there, not in the job's working directory
SERVE = [*SAFE_PYTHON, "-m", "vigil.recovery.diagnostics", "--serve"]


@dataclass(kw_only=True)
class WarmDiagnostics(IdleProcess):
    env: dict[str, str]  # the environment diagnostics run with (the agent's for commands)
    refill_delay_s: float = 30.0  # after a round (`refill`) comes the restart: the next child imports once that trains
    argv: list[str] = field(default_factory=lambda: list(SERVE))

    def prepare(self) -> None:
        """Start the next diagnostics child unless one waits (never raises)."""
        with self._lock:
            if self._closed or (self._proc is not None and self._proc.poll() is None):
                return
            try:
                self._proc = self.spawn(self.argv, self.env, subprocess.STDOUT, cwd=SAFE_CWD)
            except OSError as exc:
                log.warning("warm diagnostics: cannot start %s (%s); the next round starts cold", self.argv[0], exc)
                self._proc = None

    def take(self, args: Sequence[str], identity: Mapping[str, str]) -> subprocess.Popen[bytes] | None:
        """The waiting child, ordered to run the diagnostics with `args` as `identity`; None: start cold."""
        proc = self._pop(refill=False)  # the next one after the round (`refill`): not beside its measurements
        return None if proc is None else self._order(proc, {"argv": list(args), "env": dict(identity)},
                                                      "warm diagnostics")
