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
for everyone (a checkpoint step) moves the median with it and flags nobody. When every
stage group is large enough (hostcells.py) each window's cells are read once and judged as
they are read, and kept for the walk (kept.py: a run reads only the windows new to it, and
a window again when its rows changed); otherwise `judge` takes the run's cells each time.

A host is also held to **its own usual level**: hosts differ by a percent or two for good
(a speed lottery of silicon and clocks), so a peer group's spread hides a host that turns
4-6 % slower. Each window's time relative to its stage group's median is compared with the
median of that ratio over the `straggler.self_windows` windows before the judged ones (at
least `self_min_windows`; the same peer groups as the judged windows'), its noise their MAD: a host that *became* slow is flagged by the
same thresholds (slowdown %, excess ms, robust z), at once. A host slow since before its
baseline is still the peer comparison's. The
k-of-n rules (slowness.py): it fires when
flagged in `k` of the last `n` windows, or (a host slow on a fraction of its steps) in
`k_long` of the last `n_long` and one of the last `n`; it stays firing while flagged in
any of the last `n`. One alert per host (subject `host/<phase>`, the phase with the
largest excess; every slow phase in the evidence).

Per GPU (gpus.py): a rank slower than the other ranks of its host is named `host/gpuN`;
a slow host whose heartbeats show exactly one GPU throttled (a tensor-parallel group
waits for its slowest GPU, so the whole host is slow) is named by that GPU too, with
its SM clock, throttle reasons, temperature and power as evidence.

The first `straggler.warmup_steps` steps of a job (compilation, caches) are not judged.
A job with fewer hosts than `straggler.min_hosts` has no robust centre of hosts, so its
ranks are compared instead (ranks.py; with only 2-3 ranks, confirmed by the others'
waiting).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

from vigil.analyzer.detect import hostcells
from vigil.analyzer.detect.base import EvalContext, Finding, last_complete_step
from vigil.analyzer.detect.gpus import gpu_readings, judge_gpu_ranks, name_gpus, one_per_host, rank_candidates
from vigil.analyzer.detect.kept import kept_windows
from vigil.analyzer.detect.phases import JobPhases, cells_source, cells_sql, job_phases
from vigil.analyzer.detect.ranks import judge_ranks
from vigil.analyzer.detect.slowness import W, findings, judge

__all__ = ["StragglerDetector", "judge"]

# Peer groups from the steps being judged (each carries its rank's pp coordinate), not from
# job_ranks: the job's registration travels on another topic and may be ingested later.
_FIRST_SQL = "SELECT min(step) AS first FROM job_steps WHERE job_id = {job:String}"

_PEERS_SQL = """
SELECT host, arrayStringConcat(arraySort(groupUniqArray(toString(pp))), ',') AS stages
FROM phase_rank_windows
WHERE job_id = {job:String} AND window >= {lo:UInt64} AND window <= {hi:UInt64}
GROUP BY host
"""

_CAUSED_SQL = """
SELECT window, host, med - wait AS caused FROM (
  SELECT window, host, wait, quantileExact(0.5)(wait) OVER (PARTITION BY window) AS med
  FROM (SELECT window, host, sum(mean_ms) AS wait FROM ($cells) GROUP BY window, host))
WHERE has({hosts:Array(String)}, host)
"""


class StragglerDetector:
    name = "straggler"
    false_alarms_per_hour = 0.45  # hosts x compute phases x windows, and every GPU against its host: most tests
    cadence_s = 8.0  # judged over 5-step windows and k of n of them: every 8 s of event time, not every instant
    cadence_phase_s = 2.0  # at 2, 10, 18 ... s: on the 2 s grid never at traffic_stall's (every 4 s) nor nic_flap's

    def detect(self, ctx: EvalContext) -> list[Finding]:
        s = ctx.settings.straggler
        last = last_complete_step(ctx)
        if last is None:
            return []
        hi = (last - s.lag_steps + 1) // W - 1
        if hi < 0:
            return []
        # the current run (epoch.py) after its warm-up: a restart takes fresh windows
        first = ctx.epoch.first_step if ctx.epoch is not None else int(ctx.rows(_FIRST_SQL)[0]["first"])
        lo = max(0, hi - s.n_long + 1, -(-(first + s.warmup_steps) // W))  # whole windows after the warm-up
        if lo > hi:
            return []
        firing = {subj.split(":", 1)[1] for subj in ctx.firing if subj.startswith("straggler:")}
        # the same complete windows judged healthy at an earlier instant of this walk: still healthy
        seen = (ctx.epoch.index if ctx.epoch is not None else -1, lo, hi)
        if not firing and ctx.state.get(self.name) == seen:
            return []
        found = self._judge(ctx, lo, hi, firing)
        ctx.state[self.name] = seen if not found else None
        return found

    def _judge(self, ctx: EvalContext, lo: int, hi: int, firing: set[str]) -> list[Finding]:
        s = ctx.settings.straggler
        phases = job_phases(ctx, lo, hi)
        if not phases.compute:
            return []
        peers = {str(r["host"]): str(r["stages"]) for r in ctx.rows(_PEERS_SQL, lo=lo, hi=hi)}
        if 0 < len(peers) < s.min_hosts:
            sql, params = cells_sql("phase_rank_windows", "host, rank, pp", phases, waiting=True)
            return judge_ranks(ctx.rows(sql, **params, lo=lo, hi=hi), phases, s, firing, hi)
        if peers and min(Counter(peers.values()).values()) >= s.min_hosts:
            hosts = self._large_groups(ctx, phases, peers, lo, hi, firing)
        else:
            sql, params = cells_sql("phase_host_windows", "host", phases, waiting=True)
            hosts = judge(ctx.rows(sql, **params, lo=lo, hi=hi), peers, s, firing, phases=phases, hi=hi)
        ranks = judge_gpu_ranks(self._rank_candidates(ctx, phases, max(lo, hi - s.n + 1), hi), s, firing, hi)
        held = {f.host for f in hosts if f.subject in firing}  # a host already paged as slow stays the host
        ranks = [f for f in ranks if f.host not in held]
        named = {f.host for f in ranks}
        hosts = [f for f in hosts if f.host not in named]  # the slow GPU explains its host's excess
        gpus = gpu_readings(ctx, sorted({f.host for f in hosts + ranks}), s)
        return name_gpus(hosts, gpus, s, firing) + one_per_host(ranks, gpus, s, firing)

    @staticmethod
    def _rank_candidates(ctx: EvalContext, phases: JobPhases, lo: int, hi: int) -> list[dict[str, Any]]:
        """`rank_candidates` of windows lo..hi, each window's read once (kept.py: a window's flagged ranks are a
        function of its own rows)."""
        s = ctx.settings.straggler

        def read(a: int, b: int) -> dict[int, list[dict[str, Any]]]:
            out: dict[int, list[dict[str, Any]]] = defaultdict(list)
            for r in rank_candidates(ctx, phases, a, b, s):
                out[int(r["window"])].append(r)
            return out

        run = (ctx.epoch.index if ctx.epoch is not None else -1, sorted(phases.kinds.items()), repr(s))
        none: list[dict[str, Any]] = []
        source = cells_source("phase_rank_windows", phases)  # what rank_candidates reads
        kept = kept_windows(ctx, "straggler.ranks", run, lo, hi, read, none, source=source)
        return [r for w in range(lo, hi + 1) for r in kept[w]]

    def _large_groups(self, ctx: EvalContext, phases: JobPhases, peers: Mapping[str, str], lo: int, hi: int,
                      firing: set[str]) -> list[Finding]:
        s = ctx.settings.straggler
        cells, params = cells_sql("phase_host_windows", "host", phases)
        first = ctx.epoch.first_step if ctx.epoch is not None else 0
        base_lo = min(lo, max(lo - s.self_windows, -(-(first + s.warmup_steps) // W)))
        run = (ctx.epoch.index if ctx.epoch is not None else -1, cells, repr(sorted(params.items())))
        source = cells_source("phase_host_windows", phases)
        ws = hostcells.windows(ctx, run, cells, params, source, peers, base_lo, hi, s)
        flags, ends = hostcells.flagged(ws, lo, hi)
        if lo - base_lo >= s.self_min_windows:
            hostcells.shifted(ws, base_lo, lo, hi, s, flags, ends)
        found = findings(flags, ends, hi, s, firing, peers)
        if not found or not phases.waiting:
            return found
        cells, params = cells_sql("phase_host_windows", "host", phases, compute=False, waiting=True)
        named = {f.host for f in found}
        latest = [max(h.window for h in hs) for (_p, u), hs in flags.items() if u in named]  # each phase's last
        caused = {(int(r["window"]), str(r["host"])): float(r["caused"]) for r in ctx.rows(
            _CAUSED_SQL.replace("$cells", cells), **params, lo=min(latest), hi=max(latest),
            hosts=sorted({f.host for f in found}))}
        return findings(flags, ends, hi, s, firing, peers, caused)
