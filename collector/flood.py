"""Rate limiting of repeated log events: a burst passes, the rest is summarised, never lost.

Per key (category, rank) a window opens at the first event; the first `burst` events
in it pass as they are. Later ones are counted and the last of them is kept; when the
window ends (`due`) or the stream ends (`drain`) that last event comes back with
`repeats` = how many were suppressed. Pure logic: the caller passes the clock.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(kw_only=True)
class _Window(Generic[T]):
    start: float
    passed: int = 0
    suppressed: int = 0
    last: T | None = None


@dataclass(kw_only=True)
class FloodLimiter(Generic[T]):
    burst: int = 20
    window_s: float = 10.0
    suppressed_total: int = 0
    _windows: dict[Hashable, _Window[T]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.burst < 1 or self.window_s <= 0:
            raise ValueError("flood limiter: burst must be >= 1 and window_s > 0")

    def offer(self, key: Hashable, item: T, now: float) -> list[tuple[T, int]]:
        """What to emit now for `item`: itself (repeats 1), or nothing while suppressed,
        preceded by the summary of this key's window if it just ended."""
        out: list[tuple[T, int]] = []
        win = self._windows.get(key)
        if win is not None and now - win.start >= self.window_s:
            out += self._close(key)
            win = None
        if win is None:
            win = self._windows[key] = _Window(start=now)
        if win.passed < self.burst:
            win.passed += 1
            out.append((item, 1))
        else:
            win.suppressed += 1
            win.last = item
            self.suppressed_total += 1
        return out

    def due(self, now: float) -> list[tuple[T, int]]:
        """Summaries of windows that have ended."""
        out: list[tuple[T, int]] = []
        for key in [k for k, w in self._windows.items() if now - w.start >= self.window_s]:
            out += self._close(key)
        return out

    def drain(self) -> list[tuple[T, int]]:
        """Summaries of every open window (end of stream)."""
        out: list[tuple[T, int]] = []
        for key in list(self._windows):
            out += self._close(key)
        return out

    def _close(self, key: Hashable) -> list[tuple[T, int]]:
        win = self._windows.pop(key)
        if win.suppressed and win.last is not None:
            return [(win.last, win.suppressed)]
        return []
