"""Straggler / fail-slow host: a host whose phase time sits above its peers' robust centre.

Per job, phase and complete 5-step window (`phase_host_windows`), each host's mean
phase time is compared with the median of its peer group: hosts in the same pipeline
stage(s), because first/last stages legitimately do more work (stages are read from the
steps themselves, so they are known before the job's registration arrives); a stage group
too small for a robust centre is judged against the whole fleet with each host's time taken
relative to the median of the other hosts of its stage (a host alone in its stage has no
peer and is not judged). A host is flagged in a window when it is at least `straggler.min_slowdown_pct` slower than the median,
at least `straggler.min_excess_ms` slower in absolute terms (a tiny phase's jitter is large
in % and costs the step nothing) AND its robust z-score ((x - median) / (1.4826 * MAD)) is
at least `straggler.z`. It
fires when flagged in `straggler.k` of the last `straggler.n` windows and stays
firing while flagged in any of them. A phase slow for everyone (a checkpoint step)
moves the median with it and flags nobody.

A job with fewer hosts than `straggler.min_hosts` has no robust centre of hosts, so its
ranks are compared instead (from raw rows: a job that small is cheap to scan). That also
keeps a data-parallel trap out: with two hosts, the healthy one's backward grows while
it waits in all-reduce for the slow one, and host-vs-host would blame it; rank-vs-rank
sees the healthy ranks agree with each other. The alert still names the host, with the
rank in its evidence.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from vigil.analyzer.detect.base import EPOCH, EvalContext, Finding, as_utc, last_complete_step, median
from vigil.analyzer.settings import ROLLUP_WINDOW_STEPS, StragglerSettings

_WINDOWS_SQL = """
SELECT phase, window, host, sum(sum_ms) / sum(n) AS mean_ms, sum(n) AS samples, max(last_ts) AS window_end
FROM phase_host_windows
WHERE job_id = {job:String} AND window >= {lo:UInt64} AND window <= {hi:UInt64}
GROUP BY phase, window, host
"""

_RANK_WINDOWS_SQL = """
SELECT phase, intDiv(step, {w:UInt64}) AS window, concat(host, '#', toString(rank)) AS host,
       avg(ms) AS mean_ms, count() AS samples, max(ts) AS window_end
FROM (SELECT host, rank, step, ts, phases FROM step_timings FINAL
      WHERE job_id = {job:String} AND step >= {lo_step:UInt64} AND step <= {hi_step:UInt64})
ARRAY JOIN mapKeys(phases) AS phase, mapValues(phases) AS ms
GROUP BY phase, window, host
"""

# Peer groups from the steps being judged (each carries its rank's pp coordinate), not from
# job_ranks: the job's registration travels on another topic and may be ingested later.
_PEERS_SQL = """
SELECT host, arrayStringConcat(arraySort(groupUniqArray(toString(pp))), ',') AS stages
FROM step_timings
WHERE job_id = {job:String} AND step >= {lo_step:UInt64} AND step <= {hi_step:UInt64}
GROUP BY host
"""


class StragglerDetector:
    name = "straggler"

    def detect(self, ctx: EvalContext) -> list[Finding]:
        s = ctx.settings.straggler
        last = last_complete_step(ctx)
        if last is None:
            return []
        hi = (last - s.lag_steps + 1) // ROLLUP_WINDOW_STEPS - 1
        if hi < 0:
            return []
        lo = max(-(-ctx.epoch.first_step // ROLLUP_WINDOW_STEPS) if ctx.epoch else 0, hi - s.n + 1)
        rows = ctx.rows(_WINDOWS_SQL, lo=lo, hi=hi)
        firing = {subj.split(":", 1)[1] for subj in ctx.firing if subj.startswith("straggler:")}
        if 0 < len({r["host"] for r in rows}) < s.min_hosts:
            w = ROLLUP_WINDOW_STEPS
            ranks = ctx.rows(_RANK_WINDOWS_SQL, w=w, lo_step=lo * w, hi_step=(hi + 1) * w - 1)
            return judge_ranks(ranks, s, firing)
        w = ROLLUP_WINDOW_STEPS
        peer_rows = ctx.rows(_PEERS_SQL, lo_step=lo * w, hi_step=(hi + 1) * w - 1)
        peers = {str(r["host"]): str(r["stages"]) for r in peer_rows}
        return judge(rows, peers, s, firing)


def flag_window(values: Mapping[str, float], s: StragglerSettings) -> dict[str, tuple[float, float, float]]:
    """Hosts flagged in one window of one peer group -> (slowdown %, robust z, median ms)."""
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
          firing: set[str] | frozenset[str] = frozenset()) -> list[Finding]:
    """Findings from window rows {phase, window, host, mean_ms, last_ts}; `firing` = subjects already firing."""
    groups: dict[tuple[str, int, str], dict[str, float]] = defaultdict(dict)
    ends: dict[int, datetime] = {}
    sizes: dict[tuple[str, str], int] = defaultdict(int)
    for r in rows:
        w = int(r["window"])
        groups[(str(r["phase"]), w, peers.get(str(r["host"]), ""))][str(r["host"])] = float(r["mean_ms"])
        ends[w] = max(ends.get(w, EPOCH), as_utc(r["window_end"]))
    for (phase, _w, group), values in groups.items():
        sizes[(phase, group)] = max(sizes[(phase, group)], len(values))
    flags: dict[tuple[str, str], list[tuple[int, float, float, float, float]]] = defaultdict(list)
    relative: dict[tuple[str, int], tuple[dict[str, float], dict[str, float]]] = {}
    for (phase, w, group), values in groups.items():
        if sizes[(phase, group)] >= s.min_hosts:
            for host, (slow, z, m) in flag_window(values, s).items():
                if values[host] - m >= s.min_excess_ms:
                    flags[(phase, host)].append((w, slow, z, m, values[host]))
            continue
        # A stage group too small for a robust centre: judge its hosts against the whole fleet,
        # each host's time relative to its stage peers' (stages legitimately differ).
        if (phase, w) not in relative:
            relative[(phase, w)] = stage_relative({g: vs for (p, ww, g), vs in groups.items() if (p, ww) == (phase, w)})
        ratios, stage_ms = relative[(phase, w)]
        for host, (slow, z, m) in flag_window(ratios, s).items():
            if host in values and values[host] - m * stage_ms[host] >= s.min_excess_ms:
                flags[(phase, host)].append((w, slow, z, m * stage_ms[host], values[host]))
    windows = sorted(ends)
    findings = []
    for (phase, host), hits in flags.items():
        subject = f"{host}/{phase}"
        hits = sorted(set(hits))
        need = 1 if subject in firing else s.k
        if len(hits) < need:
            continue
        slow = sum(h[1] for h in hits) / len(hits)
        since = ends[hits[min(len(hits), s.k) - 1][0]]
        findings.append(Finding(
            alert="straggler", subject=subject, host=host, severity="warning", since=since,
            summary=f"{host} {phase} is {slow:.1f}% slower than its peers' median "
                    f"({len(hits)}/{len(windows)} windows)",
            evidence={"host": host, "phase": phase, "slowdown_pct": round(slow, 2),
                      "windows": f"{len(hits)}/{len(windows)}", "window_steps": ROLLUP_WINDOW_STEPS,
                      "steps": [windows[0] * ROLLUP_WINDOW_STEPS, (windows[-1] + 1) * ROLLUP_WINDOW_STEPS - 1],
                      "host_ms": round(hits[-1][4], 3), "peer_median_ms": round(hits[-1][3], 3),
                      "robust_z": round(min(hits[-1][2], 1e6), 2), "peer_group": peers.get(host, "")},
        ))
    return findings


def judge_ranks(rows: Sequence[Mapping[str, Any]], s: StragglerSettings,
                firing: set[str] | frozenset[str] = frozenset()) -> list[Finding]:
    """Findings of a small job from per-rank window rows whose `host` is `host#rank`; one per host/phase."""
    units = {str(r["host"]) for r in rows}
    phases = {str(r["phase"]) for r in rows}
    unit_firing = {f"{u}/{p}" for u in units for p in phases if f"{u.split('#')[0]}/{p}" in firing}
    best: dict[str, Finding] = {}
    for f in judge(rows, {}, s, unit_firing):
        host, _, rank = f.host.partition("#")
        phase = str(f.evidence["phase"])
        evidence = {**f.evidence, "host": host, "rank": int(rank), "compared": "ranks", "peer_group": ""}
        summary = (f"{host} {phase} (rank {rank}) is {evidence['slowdown_pct']:.1f}% slower than the "
                   f"other ranks' median ({evidence['windows']} windows)")
        finding = replace(f, subject=f"{host}/{phase}", host=host, summary=summary, evidence=evidence)
        current = best.get(finding.subject)
        if current is None or evidence["slowdown_pct"] > current.evidence["slowdown_pct"]:
            best[finding.subject] = finding
    return list(best.values())
