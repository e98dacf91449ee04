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

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from vigil.analyzer.detect.base import EPOCH, EvalContext, as_utc
from vigil.analyzer.detect.kept import Source, kept_windows
from vigil.analyzer.detect.slowness import Flags, Hit
from vigil.analyzer.settings import StragglerSettings

MAD_SCALE = 1.4826
"""MAD -> standard deviation of a normal distribution: the robust z's denominator."""


def upper_median(values: npt.ArrayLike) -> float:
    """ClickHouse's `quantileExact(0.5)`: the middle value, the upper one of an even count (a list or a float64
    array)."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    return float(ordered[len(ordered) // 2])


@dataclass(frozen=True)
class Cells:
    """A window's cells as read: one entry per (phase, host), in the order the engine returned them."""

    phase: list[str]
    host: list[str]
    mean: Any  # float64 array: the cell's mean ms
    end: list[Any]  # the cell's newest row


@dataclass
class Window:
    """What a window says of its hosts against their stage groups: the flagged cells, and every judged cell in
    sorted (phase, host) order with its ratio to its group's median, its mean ms, that median and its end."""

    flagged: list[tuple[str, str, Hit, datetime]] = field(default_factory=list)  # phase, host, hit, window end
    keys: tuple[tuple[str, str], ...] = ()
    ratio: Any = field(default_factory=lambda: np.empty(0))
    mean: Any = field(default_factory=lambda: np.empty(0))
    med: Any = field(default_factory=lambda: np.empty(0))
    end: list[Any] = field(default_factory=list)


def judge_window(cells: Cells, w: int, peers: Mapping[str, str], s: StragglerSettings) -> Window:
    """Judge one window's cells against their stage groups (`peers`: host -> its group), a group at a time in numpy
    (the same float64 operations as a cell at a time: tests/analyzer/test_hostcells.py)."""
    codes: dict[tuple[str, str], int] = {}
    group = np.array([-1 if (g := peers.get(h)) is None else codes.setdefault((p, g), len(codes))
                      for p, h in zip(cells.phase, cells.host, strict=True)], dtype=np.int64)
    # the SQL joined the cells with the peer groups: a host without a stage is not judged; quantileExact skipped NaN
    group[~np.isfinite(cells.mean)] = -1
    out = Window()
    judged: list[Any] = []
    group_med = np.full(len(codes), np.nan)
    for code in range(len(codes)):
        rows = np.flatnonzero(group == code)
        if not len(rows):
            continue  # its only cells were not finite
        xs = cells.mean[rows]
        med = upper_median(xs)
        if len(xs) < s.min_hosts or med <= 0:
            continue
        mad = upper_median(np.abs(xs - med)) * MAD_SCALE
        judged.append(rows)
        group_med[code] = med
        excess = xs - med
        hit = (excess >= s.min_excess_ms) & (excess / med * 100 >= s.min_slowdown_pct)
        if mad != 0:
            hit &= excess / mad >= s.z
        for i in rows[hit].tolist():
            v = float(cells.mean[i])
            out.flagged.append((cells.phase[i], cells.host[i], Hit(
                w, (v - med) / med * 100, (v - med) / mad if mad > 0 else float("inf"), med, v), cells.end[i]))
    if not judged:
        return out
    rows = np.concatenate(judged)
    keys = [(cells.phase[i], cells.host[i]) for i in rows.tolist()]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    rows = rows[order]
    out.keys = tuple(keys[j] for j in order)
    out.mean = cells.mean[rows]
    out.med = group_med[group[rows]]
    out.ratio = out.mean / out.med
    out.end = [cells.end[i] for i in rows.tolist()]
    return out


def windows(ctx: EvalContext, key: object, cells_sql: str, params: Mapping[str, object], source: Source,
            peers: Mapping[str, str], lo: int, hi: int, s: StragglerSettings) -> dict[int, Window]:
    """Windows lo..hi, each judged against its stage groups (`source`: what `cells_sql` reads).

    A window's cells are kept across the walk under `key` (kept.py), its judgement under the settings it was judged
    with and the groups of its own hosts (`still_judged`): a host that joins, leaves or changes group has the
    windows that hold it judged again from the kept cells, none read again."""
    def read(a: int, b: int) -> dict[int, Cells]:
        cols = ctx.columns(cells_sql, **params, lo=a, hi=b)
        by_window: dict[int, list[int]] = defaultdict(list)
        for i, w in enumerate(cols["window"]):
            by_window[int(w)].append(i)
        phase, host, mean, end = cols["phase"], cols["host"], cols["mean_ms"], cols["window_end"]
        return {w: Cells([phase[i] for i in idx], [host[i] for i in idx],
                         np.array([mean[i] for i in idx], dtype=np.float64), [end[i] for i in idx])
                for w, idx in by_window.items()}

    cells = kept_windows(ctx, "straggler.cells", key, lo, hi, read, _NO_CELLS, source=source)
    judge_key = (s.min_hosts, s.min_excess_ms, s.min_slowdown_pct, s.z)
    old_key, old_peers, old = ctx.state.get("straggler.hosts", (None, {}, {}))
    done = still_judged(old, old_peers, peers) if old_key == judge_key else {}
    out: dict[int, tuple[Cells, Window]] = {}
    for w in range(lo, hi + 1):
        was = done.get(w)
        out[w] = was if was is not None and was[0] is cells[w] else (cells[w], judge_window(cells[w], w, peers, s))
    ctx.state["straggler.hosts"] = (judge_key, dict(peers), out)
    return {w: v for w, (_c, v) in out.items()}


def still_judged(judged: Mapping[int, tuple[Cells, Window]], before: Mapping[str, str],
                 peers: Mapping[str, str]) -> dict[int, tuple[Cells, Window]]:
    """The windows whose judgement under `before` (host -> group) stands under `peers`: `judge_window` reads the groups of
    the window's own hosts only, so a window none of whose hosts changed group is judged as it was. At 10,000 GPUs a
    lost host leaving the groups had all ~36 windows judged again (~1.6 s); now the ones that still hold it."""
    changed = {h for h in before.keys() | peers.keys() if before.get(h) != peers.get(h)}
    return {w: v for w, v in judged.items() if changed.isdisjoint(v[0].host)}


_NO_CELLS = Cells([], [], np.empty(0), [])


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
                spread[i] = upper_median(np.abs(xs - b)) * MAD_SCALE
            mad = spread[i]
            if mad != 0 and (ratio - b) / mad < s.z:
                continue
            if any(h.window == w for h in flags.get(key, ())):
                continue
            mean_ms, med, end = float(window.mean[j]), float(window.med[j]), window.end[j]
            z = (ratio - b) / mad if mad > 0 else 1e9
            flags[key].append(Hit(w, (ratio / b - 1) * 100, z, med * b, mean_ms))
            ends[w] = max(ends.get(w, EPOCH), as_utc(end))


def _aligned(window: Window, order: tuple[tuple[str, str], ...], index: Mapping[tuple[str, str], int]) -> Any:
    """`window`'s ratios on the cells `order` (NaN where it has none)."""
    if window.keys == order:
        return window.ratio
    row = np.full(len(order) + 1, np.nan)  # the last entry takes the cells `order` lacks
    row[[index.get(k, -1) for k in window.keys]] = window.ratio
    return row[:-1]
