"""The numerical detector's rules, pure: grad-norm outliers among peers, the first non-finite step, loss spikes.

What each rule means and why: detect/numeric.py. Rows are one per (step, rank) with host, pp, tp, grad_norm, loss,
nonfinite and ts, as the detector reads them from step_timings.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from vigil.analyzer.detect.base import Finding, as_utc, median
from vigil.analyzer.settings import NumericSettings

Row = Mapping[str, Any]


def _robust(values: Sequence[float], floor: float) -> tuple[float, float]:
    m = median(values)
    return m, max(median([abs(v - m) for v in values]) * 1.4826, floor)


def grad_outliers(rows: Sequence[Row], s: NumericSettings) -> list[Finding]:
    """Ranks whose log(local grad norm) is out of their pp/tp peers' by `z` MADs in `hits` steps of `rows`."""
    groups: dict[tuple[int, int, int], dict[int, float]] = defaultdict(dict)
    hosts: dict[int, str] = {}
    for r in rows:
        g = r["grad_norm"]
        if g is not None and g > 0:
            groups[(int(r["step"]), int(r["pp"]), int(r["tp"]))][int(r["rank"])] = math.log(float(g))
            hosts[int(r["rank"])] = str(r["host"])
    hits: dict[int, list[tuple[int, float, float, float]]] = defaultdict(list)
    for (step, _pp, _tp), values in groups.items():
        if len(values) < s.min_ranks:
            continue
        m, mad = _robust(list(values.values()), s.min_mad)
        for rank, v in values.items():
            z = (v - m) / mad
            if abs(z) >= s.z:
                hits[rank].append((step, z, math.exp(v), math.exp(m)))
    out = []
    for rank, hs in sorted(hits.items()):
        if len(hs) < s.hits:
            continue
        hs.sort()
        first, last = hs[0], hs[-1]
        out.append(Finding(
            alert="numeric_fault", subject=f"{hosts[rank]}/rank{rank}", host=hosts[rank], severity="error",
            since=as_utc(next(r["ts"] for r in rows if int(r["step"]) == first[0] and int(r["rank"]) == rank)),
            summary=f"rank {rank} on {hosts[rank]}: local grad norm {last[2]:.4g} against its peers' {last[3]:.4g} "
                    f"(robust z {last[1]:+.1f}) on {len(hs)} steps since step {first[0]}",
            evidence={"signal": "grad_norm", "rank": rank, "host": hosts[rank], "step": first[0],
                      "steps": [h[0] for h in hs], "robust_z": round(last[1], 2), "grad_norm": last[2],
                      "peer_median": last[3]}))
    return out


def first_nonfinite(rows: Sequence[Row]) -> tuple[int, list[tuple[int, str]], Any] | None:
    """The first step at which any rank reported non-finite values, those ranks (rank, host), and its time."""
    bad = [r for r in rows if r["nonfinite"]]
    if not bad:
        return None
    step = min(int(r["step"]) for r in bad)
    at = [r for r in bad if int(r["step"]) == step]
    return step, sorted((int(r["rank"]), str(r["host"])) for r in at), max(r["ts"] for r in at)


def nonfinite_finding(step: int, ranks: Sequence[tuple[int, str]], ts: Any, world: int) -> Finding:
    names = ", ".join(f"rank {r} ({h})" for r, h in ranks[:8]) + (" ..." if len(ranks) > 8 else "")
    every = world > 1 and len(ranks) >= world
    return Finding(
        alert="numeric_fault", subject="nonfinite", host=ranks[0][1] if not every else "*", severity="error",
        since=as_utc(ts), summary=f"non-finite loss or gradients first at step {step} on {names}",
        evidence={"signal": "nonfinite", "step": step, "rank": ranks[0][0], "host": ranks[0][1],
                  "ranks": [r for r, _ in ranks[:64]], "every_rank": every})


LOCAL_STEPS = 5
"""A step's loss is read against the median of the steps just before it: a falling loss is no spread."""


def _rises(losses: Mapping[int, float]) -> dict[int, tuple[float, float]]:
    """step -> (its loss minus the median of the LOCAL_STEPS before it, that median)."""
    steps = sorted(losses)
    out = {}
    for k in range(LOCAL_STEPS, len(steps)):
        base = median([losses[t] for t in steps[k - LOCAL_STEPS:k]])
        out[steps[k]] = (losses[steps[k]] - base, base)
    return out


def loss_spikes(losses: Mapping[int, float], judged: Sequence[int], s: NumericSettings,
                times: Mapping[int, Any]) -> list[Finding]:
    """The job's loss (per step) spiking at a step of `judged` (`times`: each step's time): its rise over the steps
    just before it is `loss_z` MADs above the rises of the job's own history and `loss_rise_pct` of its level."""
    rises = _rises(losses)
    for step in judged:
        history = [r for t, (r, _b) in rises.items() if step - s.loss_history_steps <= t < step]
        if step not in rises or len(history) < s.loss_min_history:
            continue
        rise, base = rises[step]
        m, mad = _robust(history, 1e-6 * max(abs(base), 1e-12))
        z = (rise - m) / mad
        if z >= s.loss_z and rise >= abs(base) * s.loss_rise_pct / 100:
            v, last = losses[step], losses[max(losses)]
            back = max(losses) > step and abs(last - base) <= abs(base) * s.loss_rise_pct / 200
            return [Finding(
                alert="numeric_fault", subject="loss", host="*", severity="warning", since=as_utc(times[step]),
                summary=f"loss spiked to {v:.4g} at step {step} from {base:.4g} (robust z {z:.1f} against the "
                        f"job's own history)" + ("; back since" if back else ""),
                evidence={"signal": "loss_spike", "step": step, "loss": v, "before": base, "robust_z": round(z, 2),
                          "recovered": back})]
    return []
