"""hostcells (vectorised over cells) flags exactly what the cell-at-a-time rules flag.

The oracles below are the rules as they read before they were vectorised. Against the stage group: a
cell is judged when its group (phase, stage) has `min_hosts` finite cells and a median above 0, and
flagged when it is `min_excess_ms` and `min_slowdown_pct` over that median and `z` robust deviations
over it (MAD), ratio = ms / median. Against itself (`shifted`): each (phase, host) cell's usual
ratio is the upper median of its ratios in the base windows (at least `self_min_windows` of them,
above 0); a judged window is a hit when it is `min_slowdown_pct` over that level, `min_excess_ms` over
it in ms, and `z` robust deviations (MAD of the base ratios) over it, unless the peer rule flagged it.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from vigil.analyzer.detect import hostcells
from vigil.analyzer.detect.base import EPOCH, as_utc
from vigil.analyzer.detect.slowness import Flags, Hit
from vigil.analyzer.settings import StragglerSettings

T0 = datetime(2026, 11, 29, tzinfo=UTC)


def _window_oracle(cells: hostcells.Cells, w: int, peers: dict[str, str], s: StragglerSettings
                   ) -> tuple[list[Any], dict[tuple[str, str], tuple[float, float, float, Any]]]:
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, (phase, host) in enumerate(zip(cells.phase, cells.host, strict=True)):
        if host in peers and math.isfinite(cells.mean[i]):
            groups[(phase, peers[host])].append(i)
    flagged, judged = [], {}
    for (phase, _grp), xs in groups.items():
        med = hostcells.upper_median([float(cells.mean[i]) for i in xs])
        if len(xs) < s.min_hosts or med <= 0:
            continue
        mad = hostcells.upper_median([abs(float(cells.mean[i]) - med) for i in xs]) * hostcells.MAD_SCALE
        for i in xs:
            v, host = float(cells.mean[i]), cells.host[i]
            judged[(phase, host)] = (v / med, v, med, cells.end[i])
            if v - med >= s.min_excess_ms and (v - med) / med * 100 >= s.min_slowdown_pct \
                    and (mad == 0 or (v - med) / mad >= s.z):
                flagged.append((phase, host, Hit(w, (v - med) / med * 100,
                                                 (v - med) / mad if mad > 0 else float("inf"), med, v), cells.end[i]))
    return flagged, judged


def _ratios(window: hostcells.Window) -> dict[tuple[str, str], float]:
    return dict(zip(window.keys, window.ratio.tolist(), strict=True))


def _oracle(ws: dict[int, hostcells.Window], base_lo: int, lo: int, hi: int, s: StragglerSettings, flags: Flags,
            ends: dict[int, datetime]) -> None:
    before = [_ratios(ws[w]) for w in range(base_lo, lo)]
    usual: dict[tuple[str, str], Any] = {}
    for w in range(lo, hi + 1):
        window = ws[w]
        cells = {k: (float(window.mean[j]), window.end[j], float(window.med[j])) for j, k in enumerate(window.keys)}
        for key, ratio in _ratios(window).items():
            if key not in usual:
                xs = [r for r in (d.get(key) for d in before) if r is not None]
                base = hostcells.upper_median(xs) if len(xs) >= s.self_min_windows else 0.0
                usual[key] = (base, xs) if base > 0 else None
            if usual[key] is None:
                continue
            base, xs = usual[key]
            mean_ms, end, med = cells[key]
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


def _cells(rng: random.Random, hosts: int, n: int) -> tuple[dict[int, hostcells.Cells], dict[str, str]]:
    """Random windows of `hosts` hosts x 2 phases: some hosts usually slower or faster than their group, some
    slow in a few of the last 12 windows, a few cells missing, a group with a spread of 0."""
    level = {h: rng.choice([1.0, 1.0, 0.8, 0.8, 1.25]) for h in range(hosts)}
    slow = {h: rng.sample(range(n - 12, n), k=rng.randint(1, 4)) for h in rng.sample(range(hosts), k=hosts // 2)}
    level[0], slow[0] = 0.8, [n - 1]  # usually 20 % faster than its group, then at its median: slow only against itself
    peers = {f"h{h:03d}": str(h % 2) if hosts > 20 else "0" for h in range(hosts - 1)}  # the last one has no stage
    out = {}
    for w in range(n):
        rows: dict[str, list[Any]] = {"phase": [], "host": [], "mean_ms": [], "window_end": []}
        for h in range(hosts):
            for phase in ("forward", "backward"):
                if rng.random() < 0.03:
                    continue  # a cell missing from this window
                ms = 100.0 if phase == "backward" and h % 7 == 0 else 100.0 * level[h] * (1 + rng.gauss(0, 0.01))
                if w in slow.get(h, ()):
                    ms *= 1.25 if h == 0 else rng.choice([1.05, 1.2, 1.6])
                rows["phase"].append(phase)
                rows["host"].append(f"h{h:03d}")
                rows["mean_ms"].append(ms)
                rows["window_end"].append(T0 + timedelta(seconds=5 * w))
        if w % 7 == 3:
            rows["mean_ms"][0] = float("nan")
        order = list(range(len(rows["host"])))
        rng.shuffle(order)  # rows come back in no particular order
        out[w] = hostcells.Cells([rows["phase"][i] for i in order], [rows["host"][i] for i in order],
                                 np.array([rows["mean_ms"][i] for i in order]), [rows["window_end"][i] for i in order])
    return out, peers


def _windows(rng: random.Random, hosts: int, n: int, s: StragglerSettings) -> dict[int, hostcells.Window]:
    cells, peers = _cells(rng, hosts, n)
    return {w: hostcells.judge_window(c, w, peers, s) for w, c in cells.items()}


@pytest.mark.parametrize("seed", range(6))
def test_window_judges_as_the_cell_at_a_time_rule(seed: int) -> None:
    rng = random.Random(seed)
    s = StragglerSettings(z=rng.choice([2.0, 4.0]), min_excess_ms=rng.choice([0.0, 1.0, 5.0]))
    cells, peers = _cells(rng, rng.choice([8, 40]), 12)
    for w, c in cells.items():
        got = hostcells.judge_window(c, w, peers, s)
        flagged, judged = _window_oracle(c, w, peers, s)
        assert sorted(got.flagged, key=str) == sorted(flagged, key=str)
        assert {k: (float(got.ratio[j]), float(got.mean[j]), float(got.med[j]), got.end[j])
                for j, k in enumerate(got.keys)} == judged
        assert list(got.keys) == sorted(judged)
    assert any(hostcells.judge_window(c, w, peers, s).flagged for w, c in cells.items())


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


def _same(a: hostcells.Window, b: hostcells.Window) -> bool:
    return (a.flagged == b.flagged and a.keys == b.keys and a.end == b.end
            and all(np.array_equal(x, y, equal_nan=True) for x, y in ((a.ratio, b.ratio), (a.mean, b.mean), (a.med, b.med))))


@pytest.mark.parametrize("seed", range(4))
def test_a_peer_change_judges_again_only_the_windows_that_hold_the_host(seed: int) -> None:
    # A lost host leaves the groups once its last window leaves the judged range: the windows that no longer hold it
    # stand as judged (`_window` reads the groups of the window's own hosts), the others are judged again.
    rng = random.Random(seed)
    s = StragglerSettings()
    cells, peers = _cells(rng, 40, 16)
    gone, moved = "h005", "h006"
    for w in range(8, 16):  # h005 is silent from window 8 on
        c = cells[w]
        keep = [i for i, h in enumerate(c.host) if h != gone]
        cells[w] = hostcells.Cells([c.phase[i] for i in keep], [c.host[i] for i in keep], c.mean[keep],
                                   [c.end[i] for i in keep])
    judged = {w: (c, hostcells.judge_window(c, w, peers, s)) for w, c in cells.items()}
    assert hostcells.still_judged(judged, peers, dict(peers)) == judged  # nothing changed: every window stands
    left = {h: g for h, g in peers.items() if h != gone}
    kept = hostcells.still_judged(judged, peers, left)
    assert sorted(kept) == list(range(8, 16))
    for w, (c, was) in kept.items():  # exactly what judging it again under the new groups gives
        assert _same(was, hostcells.judge_window(c, w, left, s))
    assert any(not _same(judged[w][1], hostcells.judge_window(cells[w], w, left, s)) for w in range(8))  # others differ
    assert hostcells.still_judged(judged, peers, {**peers, moved: "x"}) == {}  # a host in every window changed group
    joined = {**peers, "h039": "0"}  # the host without a stage gets one: every window that holds it is judged again
    assert hostcells.still_judged(judged, peers, joined) == {}
    assert any(not _same(judged[w][1], hostcells.judge_window(cells[w], w, joined, s)) for w in cells)
