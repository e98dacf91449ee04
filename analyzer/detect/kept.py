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
* its read was not complete: the rollups are written by materialised views one after the other
  within an insert, so the count may already include rows whose cells a concurrent read did not
  see. Before a read, the rollup it reads (`Source`) is summed per window and phase; a read is
  complete when those sums equal the count's per phase (`job_step_runs.phase_n`) for every phase
  the read judges. The rollup is summed before the read, so the read saw at least that much; a
  read that saw more than the count sees the count change at the next call. An incomplete window is
  read again at every call, until it is complete or `SETTLE_S` (wall) has passed with its count
  unchanged (a rollup that can never match, such as one backfilled differently, is then kept as it is);
* the key differs (the run, the judged phases, the peer groups, the settings): every window is read
  again.

Memory: windows outside the asked range are dropped at each call, so a detector keeps at most the
windows of one run's range, one value per window.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from vigil.analyzer.detect.base import EvalContext
from vigil.analyzer.schema import ROLLUP_WINDOW_STEPS

T = TypeVar("T")

SETTLE_S = 30.0
"""Wall seconds after which a window whose count stayed the same is kept as read, complete or not (see the module
docstring)."""

ROLLUPS = ("phase_rank_windows", "phase_host_windows")
"""The per-window rollups a kept read may come from (`Source.rollup`)."""

_COUNTS_SQL = """
SELECT intDiv(step, {w:UInt64}) AS window, sum(ranks) AS n, sumMap(phase_n) AS phase_n FROM job_step_runs
WHERE job_id = {job:String} AND step >= {s0:UInt64} AND step <= {s1:UInt64}
GROUP BY window
"""

_SAMPLES_SQL = """
SELECT window, phase, sum(n) AS n FROM {rollup}
WHERE job_id = {{job:String}} AND window >= {{lo:UInt64}} AND window <= {{hi:UInt64}} AND phase IN {{phases:Array(String)}}
GROUP BY window, phase
"""


@dataclass(frozen=True, kw_only=True)
class Source:
    """What a kept read reads: the rollup (one of `ROLLUPS`) and the phases whose rows it judges."""

    rollup: str
    phases: Sequence[str]

    def __post_init__(self) -> None:
        if self.rollup not in ROLLUPS:
            raise ValueError(f"not a per-window rollup: {self.rollup!r}")


@dataclass(frozen=True)
class Counts:
    """A window's step rows (`total`) and its rows per phase, as `job_step_runs` holds them."""

    total: int
    phases: Mapping[str, int]


_NONE = Counts(0, {})


@dataclass(frozen=True)
class _Kept(Generic[T]):
    count: int
    since: float  # monotonic wall seconds: the first read at this count
    final: bool
    value: T


def kept_windows(ctx: EvalContext, name: str, key: Hashable, lo: int, hi: int,
                 read: Callable[[int, int], Mapping[int, T]], empty: T, *, source: Source,
                 clock: Callable[[], float] = time.monotonic) -> dict[int, T]:
    """Each window lo..hi's value: kept under `ctx.state[name]` while `key` and its count hold, else `read`.

    `read(a, b)` reads windows a..b of `source` (a window it returns nothing for is `empty`).
    """
    counts = window_counts(ctx, lo, hi)
    now = clock()
    old_key, old = ctx.state.get(name, (None, {}))
    kept: dict[int, _Kept[T]] = old if old_key == key else {}
    fresh: dict[int, _Kept[T]] = {}
    stale: list[int] = []
    for w in range(lo, hi + 1):
        k = kept.get(w)
        if k is not None and k.final and k.count == counts.get(w, _NONE).total:
            fresh[w] = k
        else:
            stale.append(w)
    if stale:
        a, b = min(stale), max(stale)
        seen = _samples(ctx, source, a, b)  # before the read: the read sees at least these rows
        got = read(a, b)
        for w in stale:
            k, c = kept.get(w), counts.get(w, _NONE)
            since = k.since if k is not None and k.count == c.total else now
            complete = all(seen.get(w, {}).get(p, 0) == c.phases.get(p, 0) for p in source.phases)
            fresh[w] = _Kept(c.total, since, complete or now - since >= SETTLE_S, got.get(w, empty))
    ctx.state[name] = (key, fresh)
    return {w: k.value for w, k in fresh.items()}


def _samples(ctx: EvalContext, source: Source, lo: int, hi: int) -> dict[int, dict[str, int]]:
    """Rows per window and phase of `source`'s phases, windows lo..hi, as its rollup holds them now."""
    out: dict[int, dict[str, int]] = defaultdict(dict)
    if source.phases:
        sql = _SAMPLES_SQL.format(rollup=source.rollup)
        for r in ctx.rows(sql, lo=lo, hi=hi, phases=sorted(source.phases)):
            out[int(r["window"])][str(r["phase"])] = int(r["n"])
    return out


def window_counts(ctx: EvalContext, lo: int, hi: int) -> dict[int, Counts]:
    """Step rows stored per window lo..hi, in all and per phase (every run's: the rollups' windows do not tell runs
    apart)."""
    memo = ctx.memo.get("window_counts")
    if memo is not None and memo[0] <= lo and hi <= memo[1]:
        return memo[2]  # type: ignore[no-any-return]
    w = ROLLUP_WINDOW_STEPS
    counts = {int(r["window"]): Counts(int(r["n"]), {str(p): int(n) for p, n in r["phase_n"].items()})
              for r in ctx.rows(_COUNTS_SQL, w=w, s0=lo * w, s1=(hi + 1) * w - 1)}
    ctx.memo["window_counts"] = (lo, hi, counts)
    return counts
