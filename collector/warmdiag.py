"""Warm diagnostics: the agent keeps the next diagnostics child started, torch imported, for a `diagnose`.

A diagnostics round starts `python -m vigil.recovery.diagnostics` on every host of the round when the
command comes, and an interpreter plus torch's import is most of its time: ~3.5 s of one core idle,
several times that when every host of a machine imports at once. `WarmDiagnostics.prepare` starts that
child ahead, in its `--serve` mode (a session of its own, the agent's environment for commands): it
imports torch and the checks, then waits for one line on its stdin. `take` hands it the command's
arguments (this installation's, `diagnose.diagnostics_argv`, typed by the contract) and the run's
identity as that line and returns it as the run's process: the agent reads, times and kills it as it
does a cold one. None ready, or one that died waiting: the run starts cold. The next child is started
`refill_delay_s` after a take, so its import does not compete with the rest of the recovery (the
restart that follows the round). Memory: one idle interpreter with torch per agent under `--nodes`.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vigil.collector.warm import stop_idle

log = logging.getLogger(__name__)
SERVE = [sys.executable, "-m", "vigil.recovery.diagnostics", "--serve"]


@dataclass(kw_only=True)
class WarmDiagnostics:
    env: dict[str, str]  # the environment diagnostics run with (the agent's for commands)
    refill_delay_s: float = 5.0
    argv: list[str] = field(default_factory=lambda: list(SERVE))
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _closed: bool = field(default=False, init=False, repr=False)

    def prepare(self) -> None:
        """Start the next diagnostics child unless one waits (never raises)."""
        with self._lock:
            if self._closed or (self._proc is not None and self._proc.poll() is None):
                return
            try:
                self._proc = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as exc:
                log.warning("warm diagnostics: cannot start %s (%s); the next round starts cold", self.argv[0], exc)
                self._proc = None

    def take(self, args: Sequence[str], identity: Mapping[str, str]) -> subprocess.Popen[bytes] | None:
        """The waiting child, ordered to run the diagnostics with `args` as `identity`; None: start cold."""
        with self._lock:
            proc, self._proc = self._proc, None
            closed = self._closed
        if not closed:
            refill = threading.Timer(self.refill_delay_s, self.prepare)
            refill.daemon = True
            refill.start()
        if proc is None or proc.poll() is not None or proc.stdin is None:
            return None
        try:
            proc.stdin.write((json.dumps({"argv": list(args), "env": dict(identity)}) + "\n").encode())
            proc.stdin.close()
            proc.stdin = None  # its order is all it reads (and `communicate` must not flush a closed pipe)
        except OSError as exc:
            log.warning("warm diagnostics: the child refused its order (%s); starting cold", exc)
            stop_idle(proc)
            return None
        return proc

    def close(self) -> None:
        with self._lock:
            self._closed = True
            proc, self._proc = self._proc, None
        if proc is not None:
            stop_idle(proc)
