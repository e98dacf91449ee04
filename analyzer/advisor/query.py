"""Reading a job's history for the resource advisor: steps per node count, per-host medians.

Three bounded queries over the analyzer's tables (any `QueryClient`: the engine, a server or
`vigil up`'s proxy): the job's newest `max_steps` steps (a step re-run after a restart counts
once per world size, its latest run), each host's median phase times over the current world's
newest `host_steps` steps (compute = its compute-kind phases but the data phases; the kinds a
step declared win over the name's default), and each host's median training-process CPU and
memory over its heartbeats of the last `heartbeat_s` of the job's clock. `score_latest` scores
the job's latest stored advice (`advice_events`) against the steps measured after it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from vigil.analyzer.advisor.core import Recommendation, StepPoint, advise, curve
from vigil.analyzer.advisor.hosts import HostPoint
from vigil.analyzer.advisor.score import score
from vigil.analyzer.advisor.settings import AdvisorSettings
from vigil.analyzer.schema import minutes
from vigil.clickhouse.query import QueryClient
from vigil.contract import AdviceScore
from vigil.contract.phases import resolve

STEPS_SQL = """
SELECT step, world_size, uniqExact(host) AS nodes, max(step_ms) AS step_ms, sum(tokens) AS tokens,
       count() AS ranks, avg(data_ms) AS data_ms, min(t) AS first_ts
FROM (
    SELECT step, world_size, rank, argMax(host, ts) AS host, argMax(step_ms, ts) AS step_ms,
           argMax(ifNull(tokens, 0), ts) AS tokens, max(ts) AS t,
           argMax(arraySum(mapValues(mapFilter((k, v) -> has({data:Array(String)}, k), phases))), ts) AS data_ms
    FROM step_timings WHERE job_id = {job:String} AND failed = 0 AND ts > {since:DateTime64(3, 'UTC')}
    GROUP BY step, world_size, rank)
GROUP BY step, world_size
ORDER BY first_ts DESC, step DESC
LIMIT {limit:UInt32}
"""

PHASES_SQL = """
WITH (SELECT argMax(world_size, ts) FROM step_timings WHERE job_id = {job:String}) AS world,
     (SELECT max(step) FROM step_timings WHERE job_id = {job:String} AND world_size = world) AS newest
SELECT host, phase, quantileExact(0.5)(phase_ms) AS median_ms,
       anyIf(phase_kinds[phase], phase_kinds[phase] != '') AS declared
FROM step_timings
ARRAY JOIN mapKeys(phases) AS phase, mapValues(phases) AS phase_ms
WHERE job_id = {job:String} AND world_size = world AND step + {window:UInt32} > newest AND failed = 0
GROUP BY host, phase
"""

EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
LATEST_ADVICE_SQL = """
SELECT advice_id, ts, curve FROM advice_events FINAL WHERE verified = 1 AND job_id = {job:String} ORDER BY ts DESC, advice_id LIMIT 1
"""

# the job's newest heartbeat from host_clock (its rollup), then the minutes before it: heartbeats sort by the minute
# first (migration 0198), so the read selects those minutes only
CPU_SQL = f"""
WITH (SELECT max(last_ts) FROM host_clock WHERE job_id = {{job:String}} AND source = 'heartbeat')
     - toIntervalSecond({{span:UInt32}}) AS lo
SELECT host, quantileExact(0.5)(procs_cpu_pct), quantileExact(0.5)(procs_rss_mib)
FROM heartbeats
WHERE job_id = {{job:String}} AND ts >= lo AND {minutes("lo")}
GROUP BY host
"""


def steps(client: QueryClient, job: str, s: AdvisorSettings, since: datetime = EPOCH) -> list[StepPoint]:
    """The job's newest steps (stamped after `since`), oldest first."""
    got = client.query(STEPS_SQL, parameters={"job": job, "data": list(s.data_phases), "limit": s.max_steps,
                                              "since": since})
    out = [StepPoint(nodes=int(nodes), step_ms=float(ms), work=float(tokens) if tokens else float(ranks),
                     data_ms=float(data or 0.0))
           for _step, _world, nodes, ms, tokens, ranks, data, _t in got.result_rows]
    return out[::-1]


def host_points(client: QueryClient, job: str, s: AdvisorSettings, *, window: int = 200,
                heartbeat_s: int = 300) -> list[HostPoint]:
    phases: dict[str, dict[str, tuple[float, str]]] = {}
    for host, phase, ms, kind in client.query(PHASES_SQL, parameters={"job": job, "window": window}).result_rows:
        phases.setdefault(str(host), {})[str(phase)] = (float(ms), str(kind or ""))
    cpu: dict[str, tuple[Any, Any]] = {
        str(h): (c, r) for h, c, r in client.query(CPU_SQL, parameters={"job": job, "span": heartbeat_s}).result_rows}
    data = set(s.data_phases)
    out: list[HostPoint] = []
    for host, by_phase in sorted(phases.items()):
        kinds = resolve(by_phase, {p: k for p, (_, k) in by_phase.items() if k})
        c, r = cpu.get(host, (None, None))
        out.append(HostPoint(
            host=host, data_ms=sum(ms for p, (ms, _) in by_phase.items() if p in data),
            compute_ms=sum(ms for p, (ms, _) in by_phase.items() if p not in data and kinds[p] == "compute"),
            cpu_pct=None if c is None else float(c), rss_mib=None if r is None else float(r)))
    return out


def recommend(client: QueryClient, job: str, s: AdvisorSettings | None = None,
              *, nodes_range: tuple[int, int] | None = None) -> Recommendation:
    """The advisor's recommendation for `job` from what ClickHouse holds of it."""
    s = s or AdvisorSettings.load()
    return advise(job, steps(client, job, s), host_points(client, job, s), s, nodes_range=nodes_range)


def score_latest(client: QueryClient, job: str, s: AdvisorSettings) -> AdviceScore | None:
    """How the job's latest stored advice fared against the steps measured after it; None before any ran."""
    rows = client.query(LATEST_ADVICE_SQL, parameters={"job": job}).result_rows
    if not rows:
        return None
    advice_id, at, curve_json = rows[0]
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    recorded = {int(p["nodes"]): float(p["throughput"]) for p in json.loads(curve_json)}
    got = score(recorded, curve(steps(client, job, s, since=at), s))
    if got is None:
        return None
    return AdviceScore(advice_id=str(advice_id), advised_at=at, nodes=got.nodes, predicted=got.predicted,
                       measured=got.measured, error_pct=max(-100.0, got.error_pct))
