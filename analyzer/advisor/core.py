"""The resource advisor's judgement: stored history in, a recommendation with its reasons out.

Pure (no I/O; `advisor.query` reads the rows). Seed 001 (DLRover Brain): adjust a job's node
count from the throughput it measured and spot hot hosts. Three answers:

* **Node count**: each node count the job ran at is a point (median throughput of its steps,
  after warm-up). Between consecutive points the throughput each added node brought is compared
  with linear scaling from the smallest point; the recommendation is the first point after
  which it falls below `knee_fraction` (the knee), else the largest point measured (still
  scaling: say so). Only measured counts are recommended; nothing is extrapolated.
* **Hosts**: a host is *hot* when its compute time per step (or its CPU) is a robust z-score
  (median / MAD) above its peers, *starved* when its data-wait time is; both also need
  `min_host_excess_pct` above the median, so a tight fleet flags nobody.
* **Data loader**: the data phases' share of step time, and the throughput hiding it would gain.

The prediction it records is the curve (median throughput per node count); `advisor.score`
compares it with what a later generation measured.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from vigil.analyzer.advisor.hosts import HostPoint, hosts
from vigil.analyzer.advisor.settings import AdvisorSettings


@dataclass(frozen=True, kw_only=True)
class StepPoint:
    """One stored step of the job: how many nodes ran it, how long it took, what it processed."""

    nodes: int
    step_ms: float
    work: float  # tokens (or rank-batches when the job reports no tokens) of all ranks
    data_ms: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Point:
    nodes: int
    throughput: float  # work per second (median over steps)
    steps: int
    efficiency: float  # throughput per node against the smallest point's (1.0 = linear)


@dataclass(frozen=True, kw_only=True)
class Recommendation:
    job_id: str
    nodes: int | None  # None: fewer than one usable point
    predicted: float | None  # throughput at `nodes`
    current: int | None  # node count of the newest step
    curve: tuple[Point, ...]
    still_scaling: bool
    hot: tuple[str, ...] = ()
    starved: tuple[str, ...] = ()
    data_share: float | None = None  # data phases / step time
    reasons: tuple[str, ...] = field(default_factory=tuple)


def _median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def curve(steps: Sequence[StepPoint], s: AdvisorSettings) -> tuple[Point, ...]:
    """The throughput at each node count the job ran at (steps in the order they ran)."""
    by: dict[int, list[float]] = {}
    seen: dict[int, int] = {}
    for p in steps:
        seen[p.nodes] = seen.get(p.nodes, 0) + 1
        if seen[p.nodes] > s.warmup_steps and p.step_ms > 0 and p.nodes > 0:
            by.setdefault(p.nodes, []).append(p.work / (p.step_ms / 1000.0))
    rates = {n: _median(v) for n, v in sorted(by.items()) if len(v) >= s.min_steps}
    if not rates:
        return ()
    n0 = min(rates)
    per_node = rates[n0] / n0
    return tuple(Point(nodes=n, throughput=t, steps=len(by[n]), efficiency=t / n / per_node if per_node else 0.0)
                 for n, t in rates.items())


def knee(points: Sequence[Point], fraction: float) -> tuple[Point | None, bool]:
    """The last point before the added nodes stop paying `fraction` of linear; (largest, True) if none."""
    if not points:
        return None, False
    linear = points[0].throughput / points[0].nodes
    for a, b in itertools.pairwise(points):
        marginal = (b.throughput - a.throughput) / (b.nodes - a.nodes)
        if marginal < fraction * linear:
            return a, False
    return points[-1], True


def advise(job_id: str, steps: Sequence[StepPoint], host_points: Sequence[HostPoint], s: AdvisorSettings,
           *, nodes_range: tuple[int, int] | None = None) -> Recommendation:
    """The recommendation for `job_id` from its steps (oldest first) and its hosts' medians."""
    pts = curve(steps, s)
    if nodes_range is not None:
        lo, hi = nodes_range
        pts = tuple(p for p in pts if lo <= p.nodes <= hi)
    best, scaling = knee(pts, s.knee_fraction)
    current = steps[-1].nodes if steps else None
    reasons = [f"{p.nodes} nodes: {p.throughput:,.0f}/s over {p.steps} steps ({p.efficiency:.0%} of linear)"
               for p in pts]
    if best is None:
        reasons.append(f"no node count has {s.min_steps} steps after warm-up yet: no recommendation")
    elif scaling:
        more = f"; the job's range allows up to {nodes_range[1]}" if nodes_range and nodes_range[1] > best.nodes else ""
        reasons.append(f"recommend {best.nodes} nodes: throughput still scales at the largest count measured{more}")
    else:
        nxt = pts[pts.index(best) + 1]
        gain = (nxt.throughput - best.throughput) / (nxt.nodes - best.nodes) / (pts[0].throughput / pts[0].nodes)
        reasons.append(f"recommend {best.nodes} nodes: going to {nxt.nodes} adds {gain:.0%} of a node's linear "
                       f"throughput per node (knee below {s.knee_fraction:.0%})")
    hot, starved, why = hosts(host_points, s)
    reasons += why
    share = data_share([p for p in steps if p.nodes == current])
    if share is not None:
        reasons.append(f"data loader: {share:.1%} of step time; hiding it (prefetch) would gain up to "
                       f"{1 / (1 - share) - 1:.1%} throughput" if share < 1 else "data loader: all of step time")
    return Recommendation(job_id=job_id, nodes=best.nodes if best else None, predicted=best.throughput if best else None,
                          current=current, curve=pts, still_scaling=scaling, hot=hot, starved=starved,
                          data_share=share, reasons=tuple(reasons))


def data_share(steps: Sequence[StepPoint]) -> float | None:
    total = sum(p.step_ms for p in steps)
    return None if total <= 0 else min(1.0, sum(p.data_ms for p in steps) / total)
