"""How far training got on this host in the running generation, from the step records the agent ships.

`observe()` sees every delivered batch (`ObservedSink`): step records stamped at or after the
generation's launch count (an older process's records still draining from the spool do not),
and only completed ones: a failed step (the timer records a step its exception left) did not
complete, so it is neither the first nor the last step (the outcome's steps lost count on it).
One rank stands for the host (the lowest seen), so each step counts once. `reset()` starts a
new generation. Thread-safe: the shipper thread observes, the control thread reads.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from vigil.contract import Event, StepTiming


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    first_step: int | None = None
    first_step_at: datetime | None = None
    last_step: int | None = None
    last_step_at: datetime | None = None
    steps: int = 0
    step_ms: float | None = None


@dataclass(kw_only=True)
class Progress:
    recent: int = 50
    _since: datetime | None = field(default=None, init=False)
    _rank: int | None = field(default=None, init=False)
    _snap: Snapshot = field(default_factory=Snapshot, init=False)
    _times: deque[float] = field(default_factory=deque, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def reset(self, since: datetime | None) -> None:
        """Count steps stamped at or after `since` (None: count nothing until the next reset)."""
        with self._lock:
            self._since, self._rank, self._snap = since, None, Snapshot()
            self._times.clear()

    def observe(self, events: Sequence[Event]) -> None:
        with self._lock:
            if self._since is None:
                return
            for e in events:
                if not isinstance(e, StepTiming) or e.ts < self._since or e.failed:
                    continue
                if self._rank is None or e.rank < self._rank:
                    self._rank = e.rank
                    self._snap = Snapshot()
                    self._times.clear()
                if e.rank != self._rank:
                    continue
                s = self._snap
                self._times.append(e.step_ms)
                while len(self._times) > self.recent:
                    self._times.popleft()
                first = s.first_step is None
                self._snap = Snapshot(
                    first_step=e.step if first else s.first_step, first_step_at=e.ts if first else s.first_step_at,
                    last_step=e.step if s.last_step is None else max(s.last_step, e.step),
                    last_step_at=e.ts if s.last_step_at is None else max(s.last_step_at, e.ts),
                    steps=s.steps + 1, step_ms=round(statistics.median(self._times), 3),
                )

    def snapshot(self) -> Snapshot:
        with self._lock:
            return self._snap
