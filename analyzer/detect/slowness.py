"""Flagged windows -> straggler findings: the k-of-n rules shared by host, GPU and rank stragglers.

`judge` flags hosts (or any units) against their peer groups, from every cell of a run;
for large groups the straggler detector does the same per window as it reads it (hostcells.py). A unit (a host, a GPU, a rank
of a small job) is *flagged* in a 5-step window of a compute
phase when it is slower than its peers' reference by the thresholds of `StragglerSettings`
(each caller decides how). `findings` turns the flags of windows up to `hi` into at most one
finding per unit: it fires when a phase is flagged in `k` of the last `n` windows, or in
`k_long` of the last `n_long` and one of the last `n` (a unit slow on a fraction of its
steps), and stays firing while flagged in any of the last `n`. The subject is
`unit/<phase>`, the flagged phase that cost the most (summed excess), kept while firing so
one incident keeps one fingerprint. How much
longer the others wait because of the unit (`caused`: their waiting-phase time minus its
own) goes into the evidence: waiting is attributed to the rank that caused it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vigil.analyzer.detect.base import EPOCH, Finding, as_utc, median
from vigil.analyzer.detect.phases import JobPhases
from vigil.analyzer.schema import ROLLUP_WINDOW_STEPS
from vigil.analyzer.settings import StragglerSettings

W = ROLLUP_WINDOW_STEPS


@dataclass(frozen=True)
class Hit:
    window: int
    slow_pct: float
    z: float
    ref_ms: float
    value_ms: float


Flags = dict[tuple[str, str], list[Hit]]  # (phase, unit) -> flagged windows
Caused = Mapping[tuple[int, str], float]  # (window, unit) -> the others' extra waiting, ms


def flag_window(values: Mapping[str, float], s: StragglerSettings) -> dict[str, tuple[float, float, float]]:
    """Units flagged in one window of one peer group -> (slowdown %, robust z, median ms)."""
    if len(values) < s.min_hosts:
        return {}
    m = median(list(values.values()))
    if m <= 0:
        return {}
    mad = median([abs(v - m) for v in values.values()]) * 1.4826
    out: dict[str, tuple[float, float, float]] = {}
    for host, v in values.items():
        slow = (v - m) / m * 100
        z = (v - m) / mad if mad > 0 else (float("inf") if v > m else 0.0)
        if slow >= s.min_slowdown_pct and z >= s.z:
            out[host] = (slow, z, m)
    return out


def split_rows(rows: Sequence[Mapping[str, Any]], phases: JobPhases | None
               ) -> tuple[list[Mapping[str, Any]], dict[tuple[int, str], float], dict[int, datetime]]:
    """Compute-phase rows; each (window, unit)'s total waiting ms; each window's end."""
    waiting = set(phases.waiting) if phases is not None else set()
    compute: list[Mapping[str, Any]] = []
    waits: dict[tuple[int, str], float] = defaultdict(float)
    ends: dict[int, datetime] = {}
    for r in rows:
        w = int(r["window"])
        ends[w] = max(ends.get(w, EPOCH), as_utc(r["window_end"]))
        if str(r["phase"]) in waiting:
            waits[(w, str(r["host"]))] += float(r["mean_ms"])
        else:
            compute.append(r)
    return compute, dict(waits), ends


def caused_waits(waits: Mapping[tuple[int, str], float]) -> dict[tuple[int, str], float]:
    """(window, unit) -> how much longer the *other* units waited than it (median of theirs - its own)."""
    by_window: dict[int, dict[str, float]] = defaultdict(dict)
    for (w, u), v in waits.items():
        by_window[w][u] = v
    out: dict[tuple[int, str], float] = {}
    for w, vals in by_window.items():
        everyone = median(list(vals.values()))
        for u, v in vals.items():
            others = [x for y, x in vals.items() if y != u] if len(vals) <= 16 else None
            if others is None or others:
                out[(w, u)] = (median(others) if others else everyone) - v
    return out


def findings(flags: Flags, ends: Mapping[int, datetime], hi: int, s: StragglerSettings,
             firing: set[str] | frozenset[str], groups: Mapping[str, str], caused: Caused | None = None) -> list[Finding]:
    """One finding per unit whose flags satisfy the k-of-n rules; subject `unit/<phase>` (kept while firing)."""
    windows = sorted(ends)
    flagged: dict[str, list[tuple[str, list[Hit]]]] = defaultdict(list)
    fires: dict[str, bool] = {}
    intermittent: dict[str, bool] = {}
    for (phase, unit), hits in flags.items():
        hits = sorted(set(hits), key=lambda h: h.window)
        flagged[unit].append((phase, hits))
        recent = [h for h in hits if h.window > hi - s.n]
        was = any(f.startswith(f"{unit}/") for f in firing)
        if len(recent) >= (1 if was else s.k) or (len(hits) >= s.k_long and recent):
            intermittent[unit] = intermittent.get(unit, True) and len(recent) < s.k and not was
            fires[unit] = True
    out = []
    for unit in fires:
        slow = flagged[unit]
        kept = next((f.split("/", 1)[1] for f in sorted(firing) if f.startswith(f"{unit}/")), None)
        # the subject's phase: kept while firing, else the one that cost the most (summed excess)
        phase, hits = max(slow, key=lambda x: (x[0] == kept, sum(h.value_ms - h.ref_ms for h in x[1])))
        latest = hits[-1]
        wait = (caused or {}).get((latest.window, unit))
        how = (f" on {len(hits)} of the last {len(windows)} windows (intermittent)" if intermittent[unit]
               else f" ({len(hits)}/{len(windows)} windows)")
        evidence: dict[str, Any] = {
            "host": unit, "phase": phase, "slowdown_pct": round(sum(h.slow_pct for h in hits) / len(hits), 2),
            "windows": f"{len(hits)}/{len(windows)}", "window_steps": W, "intermittent": intermittent[unit],
            "steps": [windows[0] * W, (windows[-1] + 1) * W - 1] if windows else [],
            "host_ms": round(latest.value_ms, 3), "peer_median_ms": round(latest.ref_ms, 3),
            "robust_z": round(min(latest.z, 1e6), 2), "peer_group": groups.get(unit, ""),
            "phases": {p: round(sum(h.slow_pct for h in hs) / len(hs), 2) for p, hs in sorted(slow)}}
        if wait is not None:
            evidence["others_wait_ms"] = round(wait, 3)
        out.append(Finding(
            alert="straggler", subject=f"{unit}/{kept or phase}", host=unit, severity="warning",
            since=ends.get(hits[min(len(hits), s.k) - 1].window, EPOCH),
            summary=f"{unit} {phase} is {evidence['slowdown_pct']:.1f}% slower than its peers' median{how}"
                    + (f"; the others wait {wait:.0f} ms longer per step" if wait is not None and wait >= 1 else ""),
            evidence=evidence))
    return out


def stage_relative(stages: Mapping[str, Mapping[str, float]]) -> tuple[dict[str, float], dict[str, float]]:
    """Each host's time / the median of the other hosts of its stage group (ms), over one window.

    Leaving the host out keeps a slow host from pulling its own reference up (with two
    hosts in a stage it would halve its slowdown); a host alone in its stage has no
    reference and is left out.
    """
    ratios: dict[str, float] = {}
    reference: dict[str, float] = {}
    for values in stages.values():
        for host, v in values.items():
            others = [x for h, x in values.items() if h != host]
            m = median(others) if others else 0.0
            if m > 0:
                ratios[host] = v / m
                reference[host] = m
    return ratios, reference


def judge(rows: Sequence[Mapping[str, Any]], peers: Mapping[str, str], s: StragglerSettings,
          firing: set[str] | frozenset[str] = frozenset(), *, phases: JobPhases | None = None,
          hi: int | None = None) -> list[Finding]:
    """Host findings from window rows {phase, window, host, mean_ms, window_end}; `firing` = subjects firing."""
    compute, waits, ends = split_rows(rows, phases)
    groups: dict[tuple[str, int, str], dict[str, float]] = defaultdict(dict)
    for r in compute:
        groups[(str(r["phase"]), int(r["window"]), peers.get(str(r["host"]), ""))][str(r["host"])] = float(r["mean_ms"])
    sizes: dict[tuple[str, str], int] = defaultdict(int)
    for (phase, _w, group), values in groups.items():
        sizes[(phase, group)] = max(sizes[(phase, group)], len(values))
    flags: Flags = defaultdict(list)
    relative: dict[tuple[str, int], tuple[dict[str, float], dict[str, float]]] = {}
    for (phase, w, group), values in groups.items():
        if sizes[(phase, group)] >= s.min_hosts:
            for host, (slow, z, m) in flag_window(values, s).items():
                if values[host] - m >= s.min_excess_ms:
                    flags[(phase, host)].append(Hit(w, slow, z, m, values[host]))
            continue
        # A stage group too small for a robust centre: judge its hosts against the whole fleet,
        # each host's time relative to its stage peers' (stages legitimately differ).
        if (phase, w) not in relative:
            relative[(phase, w)] = stage_relative({g: vs for (p, ww, g), vs in groups.items() if (p, ww) == (phase, w)})
        ratios, stage_ms = relative[(phase, w)]
        for host, (slow, z, m) in flag_window(ratios, s).items():
            if host in values and values[host] - m * stage_ms[host] >= s.min_excess_ms:
                flags[(phase, host)].append(Hit(w, slow, z, m * stage_ms[host], values[host]))
    last = hi if hi is not None else max(ends, default=0)
    return findings(flags, ends, last, s, firing, peers, caused_waits(waits))
