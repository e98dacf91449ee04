"""A large job's host cells judged against their stage group and against the host's own level.

The straggler's path for jobs whose every stage group has at least `min_hosts` hosts (straggler.py
explains both rules). A window's cells (each host's mean ms per compute phase, `cells_sql`) are
read once and kept (kept.py): what a window says of its hosts — its stage groups' median and
spread, which hosts are flagged against them, each host's ratio to its group's median — is worked
out when it is read and kept with it, so a run reads the windows new to it and judges the rest
from memory. Medians are ClickHouse's `quantileExact(0.5)` (the upper middle of an even count),
as the SQL this replaces took them, so a window is flagged exactly as before. Two deliberate
differences: a non-finite cell is left out (quantileExact skipped NaN; a NaN must not pass a
threshold), and a host whose usual level is 0 ms or less is not held to it (the SQL divided by it).

Kept per window: the flagged cells, and each judged cell's ratio and (ms, end, group median): one
entry per (compute phase, host) of the window's judged stage groups.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from vigil.analyzer.detect.base import EPOCH, EvalContext, as_utc
from vigil.analyzer.detect.kept import Source, kept_windows
from vigil.analyzer.detect.slowness import Flags, Hit
from vigil.analyzer.settings import StragglerSettings

MAD_SCALE = 1.4826
"""MAD -> standard deviation of a normal distribution: the robust z's denominator."""


def upper_median(values: Sequence[float]) -> float:
    """ClickHouse's `quantileExact(0.5)`: the middle value, the upper one of an even count."""
    return sorted(values)[len(values) // 2]


@dataclass
class Window:
    flagged: list[tuple[str, str, Hit, datetime]] = field(default_factory=list)  # phase, host, hit, window end
    ratios: dict[tuple[str, str], float] = field(default_factory=dict)  # (phase, host) -> ms / its group's median
    cells: dict[tuple[str, str], tuple[float, datetime, float]] = field(default_factory=dict)  # ms, end, median
    # the judged cells in sorted order, and their ratio, mean ms and group median as arrays in that order (`shifted`)
    keys: tuple[tuple[str, str], ...] = ()
    ratio: Any = field(default_factory=lambda: np.empty(0))
    mean: Any = field(default_factory=lambda: np.empty(0))
    med: Any = field(default_factory=lambda: np.empty(0))


def _window(cols: Mapping[str, Sequence[Any]], idx: Sequence[int], w: int, peers: Mapping[str, str],
            s: StragglerSettings) -> Window:
    phase, host, mean, end = cols["phase"], cols["host"], cols["mean_ms"], cols["window_end"]
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i in idx:
        grp = peers.get(host[i])
        # the SQL joined the cells with the peer groups: a host without a stage is not judged; quantileExact skipped NaN
        if grp is not None and math.isfinite(mean[i]):
            groups[(phase[i], grp)].append(i)
    out = Window()
    for (ph, _grp), xs in groups.items():
        med = upper_median([mean[i] for i in xs])
        if len(xs) < s.min_hosts or med <= 0:
            continue
        mad = upper_median([abs(mean[i] - med) for i in xs]) * MAD_SCALE
        for i in xs:
            v, h = mean[i], host[i]
            out.ratios[(ph, h)] = v / med
            out.cells[(ph, h)] = (v, end[i], med)
            if v - med >= s.min_excess_ms and (v - med) / med * 100 >= s.min_slowdown_pct \
                    and (mad == 0 or (v - med) / mad >= s.z):
                out.flagged.append((ph, h, Hit(w, (v - med) / med * 100,
                                               (v - med) / mad if mad > 0 else float("inf"), med, v), end[i]))
    out.keys = tuple(sorted(out.ratios))
    out.ratio = np.array([out.ratios[k] for k in out.keys], dtype=np.float64)
    out.mean = np.array([out.cells[k][0] for k in out.keys], dtype=np.float64)
    out.med = np.array([out.cells[k][2] for k in out.keys], dtype=np.float64)
    return out


def windows(ctx: EvalContext, key: object, cells_sql: str, params: Mapping[str, object], source: Source,
            peers: Mapping[str, str], lo: int, hi: int, s: StragglerSettings) -> dict[int, Window]:
    """Windows lo..hi, each judged against its stage groups (kept across the walk under `key`; `source`: what
    `cells_sql` reads)."""
    def read(a: int, b: int) -> dict[int, Window]:
        cols = ctx.columns(cells_sql, **params, lo=a, hi=b)
        by_window: dict[int, list[int]] = defaultdict(list)
        for i, w in enumerate(cols["window"]):
            by_window[int(w)].append(i)
        return {w: _window(cols, idx, w, peers, s) for w, idx in by_window.items()}

    full_key = (key, tuple(sorted(peers.items())), s.min_hosts, s.min_excess_ms, s.min_slowdown_pct, s.z)
    return kept_windows(ctx, "straggler.hosts", full_key, lo, hi, read, Window(), source=source)


def flagged(ws: Mapping[int, Window], lo: int, hi: int) -> tuple[Flags, dict[int, datetime]]:
    """Hosts slower than their stage group in windows lo..hi, and each window's end (as far as its flags tell)."""
    flags: Flags = defaultdict(list)
    ends = {w: EPOCH for w in range(lo, hi + 1)}
    for w in range(lo, hi + 1):
        for phase, host, hit, end in ws[w].flagged:
            flags[(phase, host)].append(hit)
            ends[w] = max(ends[w], as_utc(end))
    return flags, ends


def shifted(ws: Mapping[int, Window], base_lo: int, lo: int, hi: int, s: StragglerSettings, flags: Flags,
            ends: dict[int, datetime]) -> None:
    """Add the windows lo..hi where a host is slower than its own usual level (its ratio to its stage group's
    median over base_lo..lo-1, at least `self_min_windows` of them); a window flagged both ways counts once.

    Vectorised over the (phase, host) cells: every window's ratios as one row of a matrix aligned on the
    judged cells, each cell's usual level its column's upper median, the two thresholds tested in one pass;
    the spread (a second sort) only for a cell with a candidate window (`shift` at least `min_slowdown_pct` and
    at least `min_excess_ms` over the usual level). The arithmetic is the same float64 operations as one cell at
    a time (tests/analyzer/test_hostcells.py holds them equal)."""
    judged = [(w, ws[w]) for w in range(lo, hi + 1)]
    order = judged[-1][1].keys  # the usual case: every window holds the same cells
    if any(window.keys != order for _, window in judged):
        order = tuple(sorted({k for _, window in judged for k in window.keys}))
    if not order or lo - base_lo < s.self_min_windows:
        return
    index = {k: i for i, k in enumerate(order)}
    before = np.vstack([_aligned(ws[w], order, index) for w in range(base_lo, lo)])  # windows x cells, NaN: none
    n = np.count_nonzero(~np.isnan(before), axis=0)
    usual = np.sort(before, axis=0)[np.minimum(n // 2, len(before) - 1), np.arange(len(order))]  # upper median
    held = (n >= s.self_min_windows) & (usual > 0)  # else too few windows, or no level to be slower than
    spread: dict[int, float] = {}
    for w, window in judged:
        if not window.keys:
            continue
        at = np.arange(len(order)) if window.keys == order else np.array([index[k] for k in window.keys])
        base = usual[at]
        with np.errstate(invalid="ignore"):
            hit = held[at] & ((window.ratio / base - 1) * 100 >= s.min_slowdown_pct) \
                & (window.mean - window.med * base >= s.min_excess_ms)
        for j in np.flatnonzero(hit).tolist():
            i, key = int(at[j]), window.keys[j]
            b, ratio = float(base[j]), float(window.ratio[j])
            if i not in spread:
                xs = before[:, i][~np.isnan(before[:, i])]
                spread[i] = upper_median(np.abs(xs - b).tolist()) * MAD_SCALE
            mad = spread[i]
            if mad != 0 and (ratio - b) / mad < s.z:
                continue
            if any(h.window == w for h in flags.get(key, ())):
                continue
            mean_ms, end, med = window.cells[key]
            z = (ratio - b) / mad if mad > 0 else 1e9
            flags[key].append(Hit(w, (ratio / b - 1) * 100, z, med * b, mean_ms))
            ends[w] = max(ends.get(w, EPOCH), as_utc(end))


def _aligned(window: Window, order: tuple[tuple[str, str], ...], index: Mapping[tuple[str, str], int]) -> Any:
    """`window`'s ratios on the cells `order` (NaN where it has none)."""
    if window.keys == order:
        return window.ratio
    row = np.full(len(order), np.nan)
    for k, r in window.ratios.items():
        if k in index:
            row[index[k]] = r
    return row
