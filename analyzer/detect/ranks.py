"""Stragglers of a small job (fewer hosts than `straggler.min_hosts`): its ranks compared.

A job that small has no robust centre of hosts, so each rank is a unit, grouped by
pipeline stage (from `phase_rank_windows`). With at least `min_hosts` ranks they are
judged like hosts (robust z). With 2-3 ranks there is no robust centre at all; a rank is
flagged when it is at least `pair_slowdown_pct` slower than the others' median AND the
others wait correspondingly longer (at least half its excess, in the job's waiting
phases): the physics of a slow peer in synchronous training. Without waiting phases
such a job is not judged: the slow rank and the rank waiting for it cannot be told apart.
The finding names the host, with the rank in its evidence.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from vigil.analyzer.detect.base import Finding, median
from vigil.analyzer.detect.phases import JobPhases
from vigil.analyzer.detect.slowness import Flags, Hit, caused_waits, findings, judge, split_rows
from vigil.analyzer.settings import StragglerSettings


def judge_ranks(rows: Sequence[Mapping[str, Any]], phases: JobPhases, s: StragglerSettings,
                firing: set[str] | frozenset[str], hi: int) -> list[Finding]:
    """A small job (fewer hosts than min_hosts): its ranks compared; one finding per host, the rank in evidence."""
    units = [{**r, "host": f"{r['host']}#{int(r['rank'])}"} for r in rows]
    n_units = len({u["host"] for u in units})
    unit_firing = {f"{u}/{f.split('/', 1)[1]}" for u in {x["host"] for x in units} for f in firing
                   if f.startswith(u.split("#")[0] + "/")}
    if n_units >= s.min_hosts:
        peers = {str(u["host"]): str(u["pp"]) for u in units}
        found = judge(units, peers, s, unit_firing, phases=phases, hi=hi)
    else:
        found = judge_pairs(units, phases, s, unit_firing, hi)
    best: dict[str, Finding] = {}
    for f in found:
        host, _, rank = f.host.partition("#")
        phase = str(f.evidence["phase"])
        evidence = {**f.evidence, "host": host, "rank": int(rank), "compared": "ranks", "peer_group": ""}
        summary = (f"{host} {phase} (rank {rank}) is {evidence['slowdown_pct']:.1f}% slower than the "
                   f"other ranks' median ({evidence['windows']} windows)")
        finding = replace(f, subject=f"{host}/{f.subject.split('/', 1)[1]}", host=host, summary=summary,
                          evidence=evidence)
        current = best.get(host)
        if current is None or evidence["slowdown_pct"] > current.evidence["slowdown_pct"]:
            best[host] = finding
    return list(best.values())


def judge_pairs(rows: Sequence[Mapping[str, Any]], phases: JobPhases, s: StragglerSettings,
                firing: set[str] | frozenset[str], hi: int) -> list[Finding]:
    """2-3 units: slower than the others by pair_slowdown_pct, and the others wait for it (the mirror)."""
    compute, waits, ends = split_rows(rows, phases)
    if not waits:
        return []  # without waiting phases two units cannot tell the slow one from the waiting one
    cells: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for r in compute:
        cells[(str(r["phase"]), int(r["window"]))][str(r["host"])] = float(r["mean_ms"])
    caused = caused_waits(waits)
    flags: Flags = defaultdict(list)
    for (phase, w), values in cells.items():
        for unit, v in values.items():
            others = [x for u, x in values.items() if u != unit]
            if not others:
                continue
            m = median(others)
            excess = v - m
            mirror = caused.get((w, unit))
            if (m > 0 and excess / m * 100 >= s.pair_slowdown_pct and excess >= s.min_excess_ms
                    and mirror is not None and mirror >= 0.5 * excess):
                flags[(phase, unit)].append(Hit(w, excess / m * 100, float("inf"), m, v))
    return findings(flags, ends, hi, s, firing, {}, caused)
