"""DLRover's two-round node check as pure functions: who is tested with whom, and what it means.

Round 1 splits the hosts, in sorted order, into groups of two (the last group takes three
when the count is odd); each group runs the check together (GEMM, intra-node all-to-all,
all-reduce within the group). After round 1 a host is a **suspect** when its group failed
(a member's test raised, timed out or never reported: a pair fails as a whole) or when its
own elapsed time is more than `slow_factor` x the median of round 1. Round 2 pairs each
suspect with a healthy host, one it was not grouped with when there is a choice. Verdicts:

* **faulty**: failed in both rounds;
* **slow**: slower than `slow_factor` x the round-1 median in both rounds (failed in one
  and slow in the other: faulty);
* **healthy**: otherwise (a suspect cleared by round 2: it failed only with its old partner).

A suspect that cannot be re-tested (more suspects than healthy hosts) keeps its round-1
result as its round-2 result, and its verdict says so (`retested` = 0). The elapsed time
of a host is its own part of the check (the all-reduce is timed after a barrier, so a
host never pays for its partner's slow GEMM); slowness needs at least 3 timed hosts.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vigil.contract import Verdict


@dataclass(frozen=True, kw_only=True)
class HostResult:
    host: str
    ok: bool
    elapsed_s: float | None = None
    values: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class HostVerdict:
    host: str
    verdict: Verdict
    reason: str
    values: dict[str, float]


def round1_groups(hosts: Sequence[str]) -> list[list[str]]:
    ordered = sorted(set(hosts))
    if len(ordered) < 2:
        return [ordered] if ordered else []
    groups = [ordered[i:i + 2] for i in range(0, len(ordered) - 1, 2)]
    if len(ordered) % 2:
        groups[-1].append(ordered[-1])
    return groups


def median_elapsed(results: Mapping[str, HostResult]) -> float | None:
    times = [r.elapsed_s for r in results.values() if r.ok and r.elapsed_s is not None]
    return statistics.median(times) if len(times) >= 3 else None


def _slow(r: HostResult | None, median: float | None, factor: float) -> bool:
    return bool(r is not None and r.ok and r.elapsed_s is not None and median is not None
                and r.elapsed_s > factor * median)


def suspects(results: Mapping[str, HostResult], slow_factor: float) -> list[str]:
    """Hosts to re-test: failed (with their group) or slow in round 1."""
    median = median_elapsed(results)
    return sorted(h for h, r in results.items() if not r.ok or _slow(r, median, slow_factor))


def round2_groups(suspect_hosts: Sequence[str], hosts: Sequence[str], round1: Sequence[Sequence[str]]) -> list[list[str]]:
    """Each suspect with a healthy host, one not in its round-1 group when possible; at most one suspect per
    healthy host (the rest are not re-tested)."""
    sus = sorted(set(suspect_hosts))
    healthy = [h for h in sorted(set(hosts)) if h not in sus]
    partner_of = {h: set(g) for g in round1 for h in g}
    groups: list[list[str]] = []
    for s in sus:
        if not healthy:
            break
        fresh = [h for h in healthy if h not in partner_of.get(s, set())]
        pick = (fresh or healthy)[0]
        healthy.remove(pick)
        groups.append([s, pick])
    return groups


def judge(round1: Mapping[str, HostResult], round2: Mapping[str, HostResult], slow_factor: float) -> dict[str, HostVerdict]:
    """A verdict for every host of round 1."""
    median = median_elapsed(round1)
    sus = set(suspects(round1, slow_factor))
    out: dict[str, HostVerdict] = {}
    for host, r1 in sorted(round1.items()):
        retested = host in round2
        r2 = round2.get(host, r1) if host in sus else None
        values: dict[str, float] = {"ok_r1": float(r1.ok), "retested": float(retested)}
        if r1.elapsed_s is not None:
            values["elapsed_s_r1"] = round(r1.elapsed_s, 4)
        if median is not None:
            values["median_s"] = round(median, 4)
            if r1.elapsed_s is not None:
                values["ratio_r1"] = round(r1.elapsed_s / median, 3)
        if r2 is not None:
            values["ok_r2"] = float(r2.ok)
            if r2.elapsed_s is not None:
                values["elapsed_s_r2"] = round(r2.elapsed_s, 4)
                if median is not None:
                    values["ratio_r2"] = round(r2.elapsed_s / median, 3)
        for k, v in r1.values.items():
            values[f"{k}_r1"] = v
        if r2 is not None and retested:
            for k, v in r2.values.items():
                values[f"{k}_r2"] = v
        if host not in sus or r2 is None:
            out[host] = HostVerdict(host=host, verdict="healthy", reason="passed round 1", values=values)
        elif not r1.ok and not r2.ok:
            out[host] = HostVerdict(host=host, verdict="faulty", values=values,
                                    reason="failed both rounds" if retested else "failed round 1, not re-tested")
        elif _slow(r1, median, slow_factor) and _slow(r2, median, slow_factor):
            out[host] = HostVerdict(host=host, verdict="slow", values=values,
                                    reason=f"slower than {slow_factor:g}x the median in both rounds"
                                    if retested else f"slower than {slow_factor:g}x the median, not re-tested")
        elif (not r2.ok or _slow(r2, median, slow_factor)) and retested:
            out[host] = HostVerdict(host=host, verdict="faulty", values=values,
                                    reason="failed in one round and slow in the other")
        else:
            out[host] = HostVerdict(host=host, verdict="healthy", values=values,
                                    reason="cleared by round 2" if retested else "passed round 1")
    return out
