"""Straggler / fail-slow host or GPU: compute time above its peers', judged like with like.

Waiting is not slowness. In synchronous training the ranks that wait for a slow peer
show longer communication / waiting phases (`grad_sync`, `bubble`, ...) and the slow
rank a shorter one, so only **compute** phases are judged (kinds: vigil/contract/phases.py;
a waiting phase nested in a compute phase is subtracted from it), and the others'
waiting is attributed to the host that caused it (`others_wait_ms` in the evidence).

Host level, per job, compute phase and complete 5-step window (`phase_host_windows`):
each host's mean is compared with the median of its peer group, the hosts of the same
pipeline stage(s) (the first stage carries the embedding, the last the head and loss:
structural, never a fault). Stages are read from the steps themselves, so they are known
before the job's registration arrives. A stage group too small for a robust centre is
judged against the whole fleet with each host's time taken relative to its stage peers'
median (itself left out). A host is flagged in a window when it is at least
`straggler.min_slowdown_pct` slower than the median, at least `straggler.min_excess_ms`
slower in absolute terms (a tiny phase's jitter is large in % and costs the step nothing)
AND its robust z ((x - median) / (1.4826 * MAD)) is at least `straggler.z`. A phase slow
for everyone (a checkpoint step) moves the median with it and flags nobody. It fires when
flagged in `k` of the last `n` windows, or (a host slow on a fraction of its steps) in
`k_long` of the last `n_long` and one of the last `n`; it stays firing while flagged in
any of the last `n`. One alert per host (subject `host/<phase>`, the phase with the
largest excess; every slow phase in the evidence).

Per GPU (gpus.py): a rank slower than the other ranks of its host is named `host/gpuN`;
a slow host whose heartbeats show exactly one GPU throttled (a tensor-parallel group
waits for its slowest GPU, so the whole host is slow) is named by that GPU too, with
its SM clock, throttle reasons, temperature and power as evidence.

A job with fewer hosts than `straggler.min_hosts` has no robust centre of hosts, so its
ranks are compared instead; with only 2-3 ranks a rank is flagged when it is at least
`pair_slowdown_pct` slower than the others AND the others wait correspondingly longer
(the physics of a slow peer; without waiting phases such a job is not judged).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from vigil.analyzer.detect.base import EPOCH, EvalContext, Finding, as_utc, last_complete_step, median
from vigil.analyzer.detect.gpus import GpuReading, gpu_outliers, gpu_readings, rank_candidates
from vigil.analyzer.detect.phases import JobPhases, cells_sql, job_phases
from vigil.analyzer.settings import ROLLUP_WINDOW_STEPS, StragglerSettings

W = ROLLUP_WINDOW_STEPS

# Peer groups from the steps being judged (each carries its rank's pp coordinate), not from
# job_ranks: the job's registration travels on another topic and may be ingested later.
_PEERS_SQL = """
SELECT host, arrayStringConcat(arraySort(groupUniqArray(toString(pp))), ',') AS stages
FROM phase_rank_windows
WHERE job_id = {job:String} AND window >= {lo:UInt64} AND window <= {hi:UInt64}
GROUP BY host
"""


@dataclass(frozen=True)
class Hit:
    window: int
    slow_pct: float
    z: float
    ref_ms: float
    value_ms: float


Flags = dict[tuple[str, str], list[Hit]]  # (phase, unit) -> flagged windows


class StragglerDetector:
    name = "straggler"

    def detect(self, ctx: EvalContext) -> list[Finding]:
        s = ctx.settings.straggler
        last = last_complete_step(ctx)
        if last is None:
            return []
        hi = (last - s.lag_steps + 1) // W - 1
        if hi < 0:
            return []
        lo = max(0, hi - s.n_long + 1)
        phases = job_phases(ctx, lo, hi)
        if not phases.compute:
            return []
        firing = {subj.split(":", 1)[1] for subj in ctx.firing if subj.startswith("straggler:")}
        sql, params = cells_sql("phase_host_windows", "host", phases, waiting=True)
        rows = ctx.rows(sql, **params, lo=lo, hi=hi)
        if 0 < len({r["host"] for r in rows}) < s.min_hosts:
            sql, params = cells_sql("phase_rank_windows", "host, rank, pp", phases, waiting=True)
            return judge_ranks(ctx.rows(sql, **params, lo=lo, hi=hi), phases, s, firing, hi)
        peers = {str(r["host"]): str(r["stages"]) for r in ctx.rows(_PEERS_SQL, lo=lo, hi=hi)}
        hosts = judge(rows, peers, s, firing, phases=phases, hi=hi)
        ranks = judge_gpu_ranks(rank_candidates(ctx, phases, lo, hi, s), s, firing, hi)
        named = {f.host for f in ranks}
        hosts = [f for f in hosts if f.host not in named]  # the slow GPU explains its host's excess
        gpus = gpu_readings(ctx, sorted({f.host for f in hosts + ranks}), s)
        return name_gpus(hosts, gpus, s, firing) + [with_gpu(f, gpus.get(f.host, [])) for f in ranks]


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


def _split(rows: Sequence[Mapping[str, Any]], phases: JobPhases | None
           ) -> tuple[list[Mapping[str, Any]], dict[tuple[int, str], float], dict[int, datetime]]:
    """Compute rows; each (window, unit)'s total waiting ms; each window's end."""
    waiting = set(phases.waiting) if phases is not None else set()
    compute, waits, ends = [], defaultdict(float), {}  # type: ignore[var-annotated]
    for r in rows:
        w = int(r["window"])
        ends[w] = max(ends.get(w, EPOCH), as_utc(r["window_end"]))
        if str(r["phase"]) in waiting:
            waits[(w, str(r["host"]))] += float(r["mean_ms"])
        else:
            compute.append(r)
    return compute, dict(waits), ends


def judge(rows: Sequence[Mapping[str, Any]], peers: Mapping[str, str], s: StragglerSettings,
          firing: set[str] | frozenset[str] = frozenset(), *, phases: JobPhases | None = None,
          hi: int | None = None) -> list[Finding]:
    """Host findings from window rows {phase, window, host, mean_ms, window_end}; `firing` = subjects firing."""
    compute, waits, ends = _split(rows, phases)
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
    return findings(flags, ends, waits, last, s, firing, peers)


def findings(flags: Flags, ends: Mapping[int, datetime], waits: Mapping[tuple[int, str], float], hi: int,
             s: StragglerSettings, firing: set[str] | frozenset[str], groups: Mapping[str, str]) -> list[Finding]:
    """One finding per unit whose flags satisfy the k-of-n rules; subject `unit/<phase>` (kept while firing)."""
    windows = sorted(ends)
    by_unit: dict[str, list[tuple[str, list[Hit], bool]]] = defaultdict(list)
    for (phase, unit), hits in flags.items():
        hits = sorted(set(hits), key=lambda h: h.window)
        recent = [h for h in hits if h.window > hi - s.n]
        was = any(f.startswith(f"{unit}/") for f in firing)
        long_rule = len(hits) >= s.k_long and recent
        if len(recent) >= (1 if was else s.k) or long_rule:
            by_unit[unit].append((phase, hits, len(recent) < s.k and not was))
    out = []
    for unit, slow in by_unit.items():
        kept = next((f.split("/", 1)[1] for f in sorted(firing) if f.startswith(f"{unit}/")), None)
        phase, hits, intermittent = max(slow, key=lambda x: (x[0] == kept, x[1][-1].value_ms - x[1][-1].ref_ms))
        latest = hits[-1]
        since = ends[hits[min(len(hits), s.k) - 1].window]
        caused = _caused_wait(waits, unit, latest.window)
        subject = f"{unit}/{kept or phase}"
        how = f" on {len(hits)} of the last {len(windows)} windows (intermittent)" if intermittent else \
              f" ({len(hits)}/{len(windows)} windows)"
        evidence: dict[str, Any] = {
            "host": unit, "phase": phase, "slowdown_pct": round(sum(h.slow_pct for h in hits) / len(hits), 2),
            "windows": f"{len(hits)}/{len(windows)}", "window_steps": W, "intermittent": intermittent,
            "steps": [windows[0] * W, (windows[-1] + 1) * W - 1], "host_ms": round(latest.value_ms, 3),
            "peer_median_ms": round(latest.ref_ms, 3), "robust_z": round(min(latest.z, 1e6), 2),
            "peer_group": groups.get(unit, ""),
            "phases": {p: round(sum(h.slow_pct for h in hs) / len(hs), 2) for p, hs, _ in sorted(slow)}}
        if caused is not None:
            evidence["others_wait_ms"] = round(caused, 3)
        out.append(Finding(
            alert="straggler", subject=subject, host=unit, severity="warning", since=since,
            summary=f"{unit} {phase} is {evidence['slowdown_pct']:.1f}% slower than its peers' median{how}"
                    + (f"; the others wait {caused:.0f} ms longer per step" if caused and caused >= 1 else ""),
            evidence=evidence))
    return out


def _caused_wait(waits: Mapping[tuple[int, str], float], unit: str, window: int) -> float | None:
    """How much longer the other units wait than `unit` in that window (its share of their waiting)."""
    own = waits.get((window, unit))
    others = [v for (w, u), v in waits.items() if w == window and u != unit]
    if own is None or not others:
        return None
    return median(others) - own


def name_gpus(found: Sequence[Finding], gpus: Mapping[str, Sequence[GpuReading]], s: StragglerSettings,
              firing: set[str] | frozenset[str]) -> list[Finding]:
    """A slow host whose readings show exactly one slow GPU is that GPU's straggler (`host/gpuN`)."""
    out = []
    for f in found:
        readings = gpus.get(f.host, [])
        odd = gpu_outliers(readings, s)
        kept = f.subject.split("/", 1)[1] if f.subject in firing else None
        ev = {**f.evidence, "gpus_checked": len(readings)}
        if len(odd) == 1 and (kept is None or kept.startswith("gpu")):
            g = odd[0]
            ev.update(gpu_evidence(g))
            out.append(replace(f, subject=f"{f.host}/gpu{g.gpu}", evidence=ev,
                               summary=f"{f.summary}; GPU {g.gpu} is throttled ({_gpu_words(g)})"))
        else:
            ev["slow_gpus"] = [g.gpu for g in odd]
            out.append(replace(f, evidence=ev))
    return out


def gpu_evidence(g: GpuReading) -> dict[str, Any]:
    return {"gpu": g.gpu, "gpu_readings": g.evidence()}


def _gpu_words(g: GpuReading) -> str:
    parts = []
    if g.clock_mhz is not None and g.host_clock_mhz:
        parts.append(f"SM clock {g.clock_mhz:.0f} MHz vs {g.host_clock_mhz:.0f}")
    if g.reasons:
        parts.append(", ".join(g.reasons))
    if g.temp_c is not None:
        parts.append(f"{g.temp_c:.0f} C")
    return "; ".join(parts) or "no readings"


def judge_gpu_ranks(rows: Sequence[Mapping[str, Any]], s: StragglerSettings,
                    firing: set[str] | frozenset[str], hi: int) -> list[Finding]:
    """Findings `host/gpuN` from flagged rank cells (gpus.rank_candidates)."""
    flags: Flags = defaultdict(list)
    ends: dict[int, datetime] = {}
    rank_of: dict[str, int] = {}
    for r in rows:
        unit = f"{r['host']}/gpu{int(r['local_rank'])}"
        rank_of[unit] = int(r["rank"])
        mad = float(r["mad"])
        z = float(r["dev"]) / mad if mad > 0 else float("inf")
        flags[(str(r["phase"]), unit)].append(Hit(int(r["window"]), float(r["dev"]) * 100, z,
                                                  float(r["host_median_ms"]), float(r["mean_ms"])))
        w = int(r["window"])
        ends[w] = max(ends.get(w, EPOCH), as_utc(r["window_end"]))
    for w in range(max(0, hi - s.n_long + 1), hi + 1):
        ends.setdefault(w, max(ends.values(), default=EPOCH))
    unit_firing = {f"{f}/x" for f in firing if "/gpu" in f}  # `host/gpuN` firing -> unit `host/gpuN` is firing
    out = []
    for f in findings(flags, ends, {}, hi, s, unit_firing, {}):
        host, _, gpu = f.host.partition("/")
        ev = {**f.evidence, "host": host, "rank": rank_of[f.host], "gpu": int(gpu[3:]), "compared": "host's ranks",
              "peer_group": "the other ranks of its host"}
        phase = f.evidence["phase"]
        out.append(replace(f, subject=f.host, host=host, evidence=ev,
                           summary=f"{host} GPU {gpu[3:]} (rank {ev['rank']}) {phase} is {ev['slowdown_pct']:.1f}% "
                                   f"slower than its host's other ranks ({ev['windows']} windows)"))
    return out


def with_gpu(f: Finding, readings: Sequence[GpuReading]) -> Finding:
    g = next((g for g in readings if g.gpu == f.evidence.get("gpu")), None)
    if g is None:
        return f
    return replace(f, evidence={**f.evidence, "gpu_readings": g.evidence()})


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
    compute, waits, ends = _split(rows, phases)
    if not waits:
        return []  # without waiting phases two units cannot tell the slow one from the waiting one
    cells: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for r in compute:
        cells[(str(r["phase"]), int(r["window"]))][str(r["host"])] = float(r["mean_ms"])
    flags: Flags = defaultdict(list)
    for (phase, w), values in cells.items():
        for unit, v in values.items():
            others = [x for u, x in values.items() if u != unit]
            if not others:
                continue
            m = median(others)
            excess = v - m
            mirror = _caused_wait(waits, unit, w)
            if (m > 0 and excess / m * 100 >= s.pair_slowdown_pct and excess >= s.min_excess_ms
                    and mirror is not None and mirror >= 0.5 * excess):
                flags[(phase, unit)].append(Hit(w, excess / m * 100, float("inf"), m, v))
    return findings(flags, ends, waits, hi, s, firing, {})
