"""The two ways a step is timed: the host clock (CPU) and CUDA events (GPU, sync-free).

Both expose the same four calls the timer makes on the training thread:
``mark()`` (a start point), ``end_phase(step, name, mark)``, ``begin(step)`` and
``finish(step)``. The host clock completes a step at once. The CUDA clock records
``torch.cuda.Event(enable_timing=True)`` pairs on the current stream and never waits
for them: finished steps sit in a bounded FIFO until every event of the oldest one
reports ``query() == True``; only then is ``elapsed_time`` read and the step emitted.
The FIFO is polled at each step boundary (non-blocking) and by the spool thread
between writes, so steps still get emitted when the training thread stops making
progress (e.g. stuck in a hung collective). When more than `max_pending` steps wait,
the oldest is dropped and counted.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from vigil.timer.step import HOST_KEY, Step

Emit = Callable[[Step], None]
_perf_ns = time.perf_counter_ns


class HostClock:
    """`time.perf_counter_ns` around each phase and step; emits each step when it ends."""

    device_name: str | None = None

    def __init__(self, emit: Emit) -> None:
        self._emit = emit

    def mark(self) -> Any:
        return _perf_ns()

    def end_phase(self, step: Step, name: str, mark: Any) -> None:
        ms = (_perf_ns() - mark) / 1e6
        phases = step.phases
        phases[name] = phases.get(name, 0.0) + ms

    def begin(self, step: Step) -> None:
        step.start = step.host_t0 = _perf_ns()

    def finish(self, step: Step) -> None:
        step.host_ms = step.step_ms = (_perf_ns() - step.host_t0) / 1e6
        self._emit(step)

    def poll(self) -> None:
        return None

    def drain(self, timeout: float) -> int:
        return 0

    @property
    def pending(self) -> int:
        return 0


class CudaClock:
    """CUDA events on the current stream; steps are emitted once their events completed."""

    def __init__(
        self,
        emit: Emit,
        on_drop: Callable[[int], None],
        *,
        device: Any,
        max_pending: int,
        event_factory: Callable[[], Any] | None = None,
        device_name: str | None = None,
    ) -> None:
        """`event_factory`/`device_name` replace torch's (tests drive this path without a GPU)."""
        if event_factory is None:
            import torch

            event_factory = functools.partial(torch.cuda.Event, enable_timing=True)
            device_name = torch.cuda.get_device_name(device)
        self._new_event = event_factory
        self.device_name = device_name
        self._emit, self._on_drop = emit, on_drop
        self._max_pending = max(1, max_pending)
        self._pending: deque[Step] = deque()
        self._pool: deque[Any] = deque()  # completed events, reusable
        self._lock = threading.Lock()  # held by whoever pops from _pending

    def _event(self) -> Any:
        try:
            ev = self._pool.pop()
        except IndexError:
            ev = self._new_event()
        ev.record()
        return ev

    def mark(self) -> Any:
        return self._event()

    def end_phase(self, step: Step, name: str, mark: Any) -> None:
        step.spans.append((name, mark, self._event()))

    def begin(self, step: Step) -> None:
        step.host_t0 = _perf_ns()
        step.start = self._event()

    def finish(self, step: Step) -> None:
        step.end = self._event()
        step.host_ms = (_perf_ns() - step.host_t0) / 1e6
        self._pending.append(step)
        if len(self._pending) > self._max_pending and self._lock.acquire(blocking=False):
            try:
                dropped = 0
                while len(self._pending) > self._max_pending:
                    self._pending.popleft()  # its events may still be in flight: not pooled
                    dropped += 1
            finally:
                self._lock.release()
            self._on_drop(dropped)
        self.poll()

    @staticmethod
    def _done(step: Step) -> bool:
        if not step.end.query():  # same stream: checked first, usually decides
            return False
        if not step.start.query():
            return False
        return all(a.query() and b.query() for _, a, b in step.spans)

    def _complete(self, step: Step) -> None:
        step.step_ms = step.start.elapsed_time(step.end)
        phases = step.phases
        for name, a, b in step.spans:
            phases[name] = phases.get(name, 0.0) + a.elapsed_time(b)
        phases[HOST_KEY] = step.host_ms
        pool = self._pool
        if len(pool) < 1024:
            pool.append(step.start)
            pool.append(step.end)
            for _, a, b in step.spans:
                pool.append(a)
                pool.append(b)
        step.spans = []
        step.start = step.end = None

    def poll(self) -> None:
        """Emit every leading pending step whose events all completed. Never waits."""
        if not self._pending or not self._lock.acquire(blocking=False):
            return
        try:
            while self._pending:
                step = self._pending[0]
                if not self._done(step):
                    break
                self._pending.popleft()
                self._complete(step)
                self._emit(step)
        finally:
            self._lock.release()

    def drain(self, timeout: float) -> int:
        """Poll until nothing is pending or `timeout` passed (for close); returns what is left."""
        deadline = time.monotonic() + timeout
        while self._pending and time.monotonic() < deadline:
            self.poll()
            if self._pending:
                time.sleep(0.001)
        return len(self._pending)

    @property
    def pending(self) -> int:
        return len(self._pending)
