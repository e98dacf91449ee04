"""The process groups of a training command, remembered so that stopping it leaves nothing behind.

torchrun starts each worker in a session (and process group) of its own, and SIGKILLing
torchrun orphans them (they are re-parented to init and keep running). So while the
command runs, `remember()` records the process group of every process under it; once the
command is gone, `reap()` terminates whatever is left in those groups: SIGTERM, then SIGKILL
after a grace period. Groups of this process and its own group are never signalled.
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass, field

import psutil

log = logging.getLogger(__name__)


def _group_members(pgids: set[int]) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) in pgids:
                out.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


@dataclass(kw_only=True)
class ProcessGroups:
    pgids: set[int] = field(default_factory=set)

    def remember(self, root_pid: int) -> None:
        """Record the process groups of `root_pid` and its descendants (never raises)."""
        own = os.getpgid(0)
        try:
            root = psutil.Process(root_pid)
            family = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        for p in family:
            try:
                pgid = os.getpgid(p.pid)
            except (ProcessLookupError, PermissionError):
                continue
            if pgid != own and pgid > 1:
                self.pgids.add(pgid)

    def leftovers(self) -> list[int]:
        """Pids still alive in the remembered groups."""
        return [p.pid for p in _group_members(self.pgids)] if self.pgids else []

    def reap(self, grace_s: float = 5.0) -> int:
        """Terminate what is left in the remembered groups; the number of processes that were left."""
        left = _group_members(self.pgids) if self.pgids else []
        if left:
            log.warning("%d processes outlived the training command (groups %s); terminating them",
                        len(left), sorted(self.pgids))
            self._signal(signal.SIGTERM)
            _gone, alive = psutil.wait_procs(left, timeout=grace_s)
            if alive:
                self._signal(signal.SIGKILL)
                psutil.wait_procs(alive, timeout=5.0)
        self.pgids.clear()
        return len(left)

    def _signal(self, sig: signal.Signals) -> None:
        for pgid in self.pgids:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                continue

