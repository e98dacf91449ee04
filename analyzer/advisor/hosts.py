"""Hot and starved hosts: robust z-scores (median / MAD) of per-host medians against their peers.

Pure. A host is *hot* when its compute time per step (or its CPU) stands out above its peers,
*starved* when its data-wait time does; either also needs `min_host_excess_pct` above the
median, so a tight fleet (tiny MAD) flags nobody for noise. Fewer than 3 hosts flag nobody.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vigil.analyzer.advisor.settings import AdvisorSettings


@dataclass(frozen=True, kw_only=True)
class HostPoint:
    """One host's medians over the steps read: compute and data-wait time per step; CPU and memory."""

    host: str
    compute_ms: float
    data_ms: float
    cpu_pct: float | None = None
    rss_mib: float | None = None


def _median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def robust_z(values: Mapping[str, float], floor: float = 1e-9) -> dict[str, float]:
    """(x - median) / (1.4826 MAD) per key; the MAD is floored at 1 % of the median (a tight fleet)."""
    if len(values) < 3:
        return {k: 0.0 for k in values}
    med = _median(list(values.values()))
    mad = _median([abs(v - med) for v in values.values()])
    scale = max(1.4826 * mad, 0.01 * abs(med), floor)
    return {k: (v - med) / scale for k, v in values.items()}


def _outliers(values: Mapping[str, float], s: AdvisorSettings) -> list[str]:
    z = robust_z(values)
    med = _median(list(values.values())) if values else 0.0
    bar = med * (1 + s.min_host_excess_pct / 100)
    return sorted(h for h, v in values.items() if z[h] > s.host_z and v > bar)


def hosts(points: Sequence[HostPoint], s: AdvisorSettings) -> tuple[tuple[str, ...], tuple[str, ...], list[str]]:
    """(hot, starved, reasons)."""
    reasons: list[str] = []
    compute = {p.host: p.compute_ms for p in points}
    cpu = {p.host: p.cpu_pct for p in points if p.cpu_pct is not None}
    data = {p.host: p.data_ms for p in points}
    hot = sorted(set(_outliers(compute, s)) | set(_outliers(cpu, s)))
    starved = _outliers(data, s)
    med_c, med_d = (_median(list(d.values())) if d else 0.0 for d in (compute, data))
    for h in hot:
        why = f"compute {compute[h]:.0f} ms/step vs median {med_c:.0f}" if h in _outliers(compute, s) else \
            f"CPU {cpu[h]:.0f} % vs median {_median(list(cpu.values())):.0f} %"
        reasons.append(f"hot host {h}: {why}")
    for h in starved:
        reasons.append(f"starved host {h}: waits {data[h]:.0f} ms/step for data vs median {med_d:.0f}")
    return tuple(hot), tuple(starved), reasons
