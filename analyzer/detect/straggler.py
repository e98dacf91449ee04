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
stage group is large enough the medians are taken in ClickHouse and only flagged cells
come back (a 1024-host job costs a few rows); otherwise `judge` does it in Python.

A host is also held to **its own usual level**: hosts differ by a percent or two for good
(a speed lottery of silicon and clocks), so a peer group's spread hides a host that turns
4-6 % slower. Each window's time relative to its stage group's median is compared with the
median of that ratio over the `straggler.self_windows` windows before the judged ones (at
least `self_min_windows`), its noise their MAD: a host that *became* slow is flagged by the
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
from datetime import datetime

from vigil.analyzer.detect.base import EPOCH, EvalContext, Finding, as_utc, last_complete_step
from vigil.analyzer.detect.gpus import gpu_readings, judge_gpu_ranks, name_gpus, one_per_host, rank_candidates
from vigil.analyzer.detect.phases import JobPhases, cells_sql, job_phases
from vigil.analyzer.detect.ranks import judge_ranks
from vigil.analyzer.detect.slowness import Flags, Hit, W, findings, judge

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

# Every stage group large enough: medians and MADs in ClickHouse, only flagged cells come back.
_FLAGGED_SQL = """
SELECT phase, window, x.1 AS host, x.2 AS mean_ms, x.3 AS window_end, med, mad
FROM (
  SELECT phase, window, grp, quantileExact(0.5)(mean_ms) AS med, count() AS size,
         groupArray((host, mean_ms, window_end)) AS xs,
         arrayReduce('quantileExact(0.5)', arrayMap(x -> abs(x.2 - med), xs)) * 1.4826 AS mad
  FROM (SELECT c.*, p.stages AS grp FROM ($cells) AS c INNER JOIN ($peers) AS p ON c.host = p.host)
  GROUP BY phase, window, grp)
ARRAY JOIN xs AS x
WHERE size >= {min_hosts:UInt32} AND med > 0 AND x.2 - med >= {excess:Float64} AND (x.2 - med) / med * 100 >= {slow:Float64}
  AND (mad = 0 OR (x.2 - med) / mad >= {z:Float64})
"""

# A host against its own level: each window's time relative to its stage group's median (the host's usual
# ratio holds its speed lottery and its stage's structure), its baseline the median ratio over the windows
# before the judged ones, its noise their MAD. Only shifted cells (judged windows) come back. The ratios are
# computed once and kept per (phase, host) as an array (a CTE referenced three times is computed three times).
_SHIFTED_SQL = """
SELECT phase, host, x.1 AS window, x.3 AS mean_ms, x.4 AS window_end, x.5 * base AS usual_ms,
       x.2 / base - 1 AS shift, if(mad > 0, (x.2 - base) / mad, 1e9) AS z
FROM (
  SELECT phase, host, xs, arrayMap(x -> x.2, arrayFilter(x -> x.1 < {from_w:UInt64}, xs)) AS before,
         arrayReduce('quantileExact(0.5)', before) AS base,
         arrayReduce('quantileExact(0.5)', arrayMap(v -> abs(v - base), before)) * 1.4826 AS mad
  FROM (
    SELECT phase, host, groupArray((window, ratio, mean_ms, window_end, med)) AS xs FROM (
      SELECT phase, window, host, mean_ms, window_end, med, mean_ms / med AS ratio FROM (
        SELECT c.*, quantileExact(0.5)(c.mean_ms) OVER (PARTITION BY c.phase, c.window, p.stages) AS med,
               count() OVER (PARTITION BY c.phase, c.window, p.stages) AS size
        FROM ($cells) AS c INNER JOIN ($peers) AS p ON c.host = p.host)
      WHERE size >= {min_hosts:UInt32} AND med > 0)
    GROUP BY phase, host)
  WHERE length(before) >= {min_base:UInt32})
ARRAY JOIN xs AS x
WHERE x.1 >= {from_w:UInt64} AND (x.2 / base - 1) * 100 >= {slow:Float64} AND x.3 - x.5 * base >= {excess:Float64}
  AND (mad = 0 OR (x.2 - base) / mad >= {z:Float64})
"""

_CAUSED_SQL = """
SELECT window, host, med - wait AS caused FROM (
  SELECT window, host, wait, quantileExact(0.5)(wait) OVER (PARTITION BY window) AS med
  FROM (SELECT window, host, sum(mean_ms) AS wait FROM ($cells) GROUP BY window, host))
WHERE has({hosts:Array(String)}, host)
"""


class StragglerDetector:
    name = "straggler"
    false_alarms_per_hour = 0.5  # hosts x compute phases x windows, and every GPU against its host: most tests
    cadence_s = 10.0  # judged over 5-step windows and k of n of them: every 10 s of event time, not every instant

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
        ranks = judge_gpu_ranks(rank_candidates(ctx, phases, max(lo, hi - s.n + 1), hi, s), s, firing, hi)
        held = {f.host for f in hosts if f.subject in firing}  # a host already paged as slow stays the host
        ranks = [f for f in ranks if f.host not in held]
        named = {f.host for f in ranks}
        hosts = [f for f in hosts if f.host not in named]  # the slow GPU explains its host's excess
        gpus = gpu_readings(ctx, sorted({f.host for f in hosts + ranks}), s)
        return name_gpus(hosts, gpus, s, firing) + one_per_host(ranks, gpus, s, firing)

    def _shifted(self, ctx: EvalContext, cells: str, params: Mapping[str, object], lo: int, hi: int, flags: Flags,
                 ends: dict[int, datetime]) -> None:
        """Add the windows lo..hi where a host is slower than its own usual level against its stage (a host
        that became slow: its speed lottery no longer hides a few %); a window flagged both ways counts once."""
        s = ctx.settings.straggler
        first = ctx.epoch.first_step if ctx.epoch is not None else 0
        base_lo = max(lo - s.self_windows, -(-(first + s.warmup_steps) // W))
        if lo - base_lo < s.self_min_windows:
            return
        sql = _SHIFTED_SQL.replace("$cells", cells).replace("$peers", _PEERS_SQL)
        rows = ctx.rows(sql, **params, lo=base_lo, hi=hi, from_w=lo, min_hosts=s.min_hosts,
                        min_base=s.self_min_windows, excess=s.min_excess_ms, slow=s.min_slowdown_pct, z=s.z)
        for r in rows:
            w, key = int(r["window"]), (str(r["phase"]), str(r["host"]))
            if any(h.window == w for h in flags.get(key, ())):
                continue
            flags[key].append(Hit(w, float(r["shift"]) * 100, float(r["z"]), float(r["usual_ms"]), float(r["mean_ms"])))
            ends[w] = max(ends.get(w, EPOCH), as_utc(r["window_end"]))

    def _large_groups(self, ctx: EvalContext, phases: JobPhases, peers: Mapping[str, str], lo: int, hi: int,
                      firing: set[str]) -> list[Finding]:
        s = ctx.settings.straggler
        cells, params = cells_sql("phase_host_windows", "host", phases)
        sql = _FLAGGED_SQL.replace("$cells", cells).replace("$peers", _PEERS_SQL)
        rows = ctx.rows(sql, **params, lo=lo, hi=hi, min_hosts=s.min_hosts, excess=s.min_excess_ms,
                        slow=s.min_slowdown_pct, z=s.z)
        flags: Flags = defaultdict(list)
        ends = {w: EPOCH for w in range(lo, hi + 1)}
        for r in rows:
            w, m, mad, v = int(r["window"]), float(r["med"]), float(r["mad"]), float(r["mean_ms"])
            flags[(str(r["phase"]), str(r["host"]))].append(
                Hit(w, (v - m) / m * 100, (v - m) / mad if mad > 0 else float("inf"), m, v))
            ends[w] = max(ends[w], as_utc(r["window_end"]))
        self._shifted(ctx, cells, params, lo, hi, flags, ends)
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
