"""hostcells.shifted (vectorised over cells) flags exactly what the cell-at-a-time rule flags.

The oracle below is the rule as it read before it was vectorised: each (phase, host) cell's usual
ratio is the upper median of its ratios in the base windows (at least `self_min_windows` of them,
above 0); a judged window is a hit when it is `min_slowdown_pct` over that level, `min_excess_ms` over
it in ms, and `z` robust deviations (MAD of the base ratios) over it, unless the peer rule flagged it.
"""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vigil.analyzer.detect import hostcells
from vigil.analyzer.detect.base import EPOCH, as_utc
from vigil.analyzer.detect.slowness import Flags, Hit
from vigil.analyzer.settings import StragglerSettings

T0 = datetime(2026, 11, 29, tzinfo=UTC)


def _oracle(ws: dict[int, hostcells.Window], base_lo: int, lo: int, hi: int, s: StragglerSettings, flags: Flags,
            ends: dict[int, datetime]) -> None:
    before = [ws[w].ratios for w in range(base_lo, lo)]
    usual: dict[tuple[str, str], Any] = {}
    for w in range(lo, hi + 1):
        window = ws[w]
        for key, ratio in window.ratios.items():
            if key not in usual:
                xs = [r for r in (d.get(key) for d in before) if r is not None]
                base = hostcells.upper_median(xs) if len(xs) >= s.self_min_windows else 0.0
                usual[key] = (base, xs) if base > 0 else None
            if usual[key] is None:
                continue
            base, xs = usual[key]
            mean_ms, end, med = window.cells[key]
            if (ratio / base - 1) * 100 < s.min_slowdown_pct or mean_ms - med * base < s.min_excess_ms:
                continue
            mad = hostcells.upper_median([abs(v - base) for v in xs]) * hostcells.MAD_SCALE
            if mad != 0 and (ratio - base) / mad < s.z:
                continue
            if any(h.window == w for h in flags.get(key, ())):
                continue
            z = (ratio - base) / mad if mad > 0 else 1e9
            flags[key].append(Hit(w, (ratio / base - 1) * 100, z, med * base, mean_ms))
            ends[w] = max(ends.get(w, EPOCH), as_utc(end))


def _windows(rng: random.Random, hosts: int, n: int, s: StragglerSettings) -> dict[int, hostcells.Window]:
    """Random windows of `hosts` hosts x 2 phases: some hosts usually slower or faster than their group, some
    slow in a few of the last 12 windows, a few cells missing, a group with a spread of 0."""
    level = {h: rng.choice([1.0, 1.0, 0.8, 0.8, 1.25]) for h in range(hosts)}
    slow = {h: rng.sample(range(n - 12, n), k=rng.randint(1, 4)) for h in rng.sample(range(hosts), k=hosts // 2)}
    peers = {f"h{h:03d}": "0" for h in range(hosts)}
    ws = {}
    for w in range(n):
        rows: dict[str, list[Any]] = {"phase": [], "host": [], "mean_ms": [], "window_end": []}
        for h in range(hosts):
            for phase in ("forward", "backward"):
                if rng.random() < 0.03:
                    continue  # a cell missing from this window
                ms = 100.0 if phase == "backward" and h % 7 == 0 else 100.0 * level[h] * (1 + rng.gauss(0, 0.01))
                if w in slow.get(h, ()):
                    ms *= rng.choice([1.05, 1.2, 1.6])
                rows["phase"].append(phase)
                rows["host"].append(f"h{h:03d}")
                rows["mean_ms"].append(ms)
                rows["window_end"].append(T0 + timedelta(seconds=5 * w))
        order = list(range(len(rows["host"])))
        rng.shuffle(order)  # rows come back in no particular order
        ws[w] = hostcells._window(rows, order, w, peers, s)
    return ws


@pytest.mark.parametrize("seed", range(12))
def test_shifted_flags_as_the_cell_at_a_time_rule(seed: int) -> None:
    rng = random.Random(seed)
    s = StragglerSettings(z=rng.choice([2.0, 4.0]), min_excess_ms=rng.choice([0.0, 1.0, 5.0]))
    n = 36
    ws = _windows(rng, rng.choice([8, 40]), n, s)
    ws[30] = hostcells.Window()  # a window with no cells at all
    base_lo, lo, hi = 0, 24, n - 1
    got_flags: Flags = defaultdict(list)
    want_flags: Flags = defaultdict(list)
    got_ends: dict[int, datetime] = {w: EPOCH for w in range(lo, hi + 1)}
    want_ends = dict(got_ends)
    peer_flags, _ = hostcells.flagged(ws, lo, hi)
    for key, hits in peer_flags.items():  # the peer rule's hits are left as they are
        got_flags[key].extend(hits)
        want_flags[key].extend(hits)
    hostcells.shifted(ws, base_lo, lo, hi, s, got_flags, got_ends)
    _oracle(ws, base_lo, lo, hi, s, want_flags, want_ends)
    assert dict(got_flags) == dict(want_flags)
    assert got_ends == want_ends
    assert sum(len(v) for v in got_flags.values()) > sum(len(v) for v in peer_flags.values())  # it found some


def test_too_few_base_windows_flag_nothing() -> None:
    s = StragglerSettings()
    ws = _windows(random.Random(1), 8, 12, s)
    flags: Flags = defaultdict(list)
    hostcells.shifted(ws, 6, 6 + s.self_min_windows - 1, 11, s, flags, {})
    assert not flags
