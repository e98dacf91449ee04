"""What a detector read of a job's complete windows, kept across the instants of a walk: read again only when it changed.

The straggler judges each 5-step window many times: among the `n_long` windows it flags, then among
the `self_windows` before them that make each host's own level. What it reads of one window (each
host's mean compute time per phase, the ranks slower than their host's others) is a function of
that window's rows alone, and the rows of a complete window stop changing. So each window is read
once and kept in the walk's state (`ctx.state`: per job, across instants and live turns; rebuilt by
reading again after a restart), and a run reads only the windows new to it: at 10,000 ranks the
straggler's cells went from ~1 s of SQL per run (36 windows) to the two windows the run added.

A kept window is read again when:

* its step count (`job_step_runs`, every bucket: the step rows the window holds) differs from the
  count taken before it was read: a late host's rows landed in it, so live converges to what replay
  reads;
* it was read less than `SETTLE_S` (wall) ago and is asked for again later: the rollups are written
  by materialised views one after the other within an insert, so a count may already include rows
  whose cells a concurrent read did not see yet; a window whose count stayed the same for
  `SETTLE_S` after a read is read once more and then kept as it is (an insert's views all land within
  seconds);
* the key differs (the run, the judged phases, the peer groups, the settings): every window is read
  again.

Memory: windows outside the asked range are dropped at each call, so a detector keeps at most the
windows of one run's range, one value per window.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from vigil.analyzer.detect.base import EvalContext
from vigil.analyzer.settings import ROLLUP_WINDOW_STEPS

T = TypeVar("T")

SETTLE_S = 30.0
"""Wall seconds after which an unchanged window is read a last time and then kept (see the module docstring)."""

_COUNTS_SQL = """
SELECT intDiv(step, {w:UInt64}) AS window, sum(ranks) AS n FROM job_step_runs
WHERE job_id = {job:String} AND step >= {s0:UInt64} AND step <= {s1:UInt64}
GROUP BY window
"""


@dataclass(frozen=True)
class _Kept(Generic[T]):
    count: int
    read_at: float  # monotonic wall seconds
    final: bool
    value: T


def kept_windows(ctx: EvalContext, name: str, key: Hashable, lo: int, hi: int,
                 read: Callable[[int, int], Mapping[int, T]], empty: T,
                 clock: Callable[[], float] = time.monotonic) -> dict[int, T]:
    """Each window lo..hi's value: kept under `ctx.state[name]` while `key` and its count hold, else `read`.

    `read(a, b)` reads windows a..b (a window it returns nothing for is `empty`).
    """
    counts = window_counts(ctx, lo, hi)
    now = clock()
    old_key, old = ctx.state.get(name, (None, {}))
    kept: dict[int, _Kept[T]] = old if old_key == key else {}
    fresh: dict[int, _Kept[T]] = {}
    stale: list[int] = []
    for w in range(lo, hi + 1):
        k = kept.get(w)
        if k is not None and k.count == counts.get(w, 0) and (k.final or now - k.read_at < SETTLE_S):
            fresh[w] = k
        else:
            stale.append(w)
    if stale:
        got = read(min(stale), max(stale))
        for w in stale:
            k = kept.get(w)
            final = k is not None and k.count == counts.get(w, 0)  # unchanged for SETTLE_S: the last read
            fresh[w] = _Kept(counts.get(w, 0), now, final, got.get(w, empty))
    ctx.state[name] = (key, fresh)
    return {w: k.value for w, k in fresh.items()}


def window_counts(ctx: EvalContext, lo: int, hi: int) -> dict[int, int]:
    """Step rows stored per window lo..hi (every run's: the rollups' windows do not tell runs apart)."""
    memo = ctx.memo.get("window_counts")
    if memo is not None and memo[0] <= lo and hi <= memo[1]:
        return memo[2]  # type: ignore[no-any-return]
    w = ROLLUP_WINDOW_STEPS
    counts = {int(r["window"]): int(r["n"]) for r in ctx.rows(_COUNTS_SQL, w=w, s0=lo * w, s1=(hi + 1) * w - 1)}
    ctx.memo["window_counts"] = (lo, hi, counts)
    return counts
