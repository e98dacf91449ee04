"""The context managers behind `StepTimer.step()` and `StepTimer.phase()`.

They are small slotted classes (not generator-based context managers) because they sit on
the training loop's hot path: a phase costs two clock reads, a list push/pop and a dict
update. They reach into the timer's private state on purpose; `timer.core` owns it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from vigil.timer.step import Step

if TYPE_CHECKING:
    from vigil.timer.core import StepTimer

# Shared no-op contexts of disabled / compiling mode. `contextlib.nullcontext` because
# torch.compile (dynamo) knows how to trace it even with fullgraph=True.
SCRATCH = Step()  # what a no-op step yields; writes to it go nowhere
NULL: AbstractContextManager[None] = nullcontext()
NULL_STEP: AbstractContextManager[Step] = nullcontext(SCRATCH)


class PhaseContext:
    """`with t.phase(name)`: a named span of the open (or next) step."""

    __slots__ = ("_mark", "_name", "_path", "_t")

    def __init__(self, t: StepTimer, name: str) -> None:
        self._t, self._name = t, name

    def __enter__(self) -> None:
        stack = self._t._stack
        self._path = path = f"{stack[-1]}/{self._name}" if stack else self._name
        stack.append(path)
        self._mark = self._t._clock.mark()

    def __exit__(self, et: type[BaseException] | None, ev: object, tb: object) -> None:
        t = self._t
        cur = t._cur
        t._clock.end_phase(cur, self._path, self._mark)
        if t._stack:
            t._stack.pop()
        if et is not None and cur.is_open:
            cur.failed = True


class StepContext:
    """`with t.step()`: opens a step on enter, hands it to the clock on exit."""

    __slots__ = ("_kw", "_owner", "_t")

    def __init__(self, t: StepTimer, kw: tuple[int | None, int | None, float | None, int | None]) -> None:
        self._t, self._kw, self._owner = t, kw, False

    def __enter__(self) -> Step:
        t = self._t
        cur = t._cur
        if cur.is_open:  # nested step: the outer one owns the record
            return cur
        self._owner = True
        tokens, samples, flops, index = self._kw
        if tokens is not None:  # None keeps what annotate() set before the step
            cur.tokens = tokens
        if samples is not None:
            cur.samples = samples
        if flops is not None:
            cur.flops = flops
        if index is not None:
            t._next_index = index
        cur.index = t._next_index
        cur.is_open = True
        t._clock.begin(cur)
        return cur

    def __exit__(self, et: type[BaseException] | None, ev: object, tb: object) -> None:
        if not self._owner:
            return
        t = self._t
        cur = t._cur
        if et is not None:
            cur.failed = True
        cur.is_open = False
        cur.ts = t._wall()
        t._cur = Step()
        t._next_index = cur.index + 1
        if t._writer is None:  # first step: start the spool thread (it also polls CUDA events)
            t._ensure_writer()
        t._clock.finish(cur)
        if t._watchdog is not None:
            t._watchdog.beat(cur.index)
