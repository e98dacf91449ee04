"""How long the watermark waits for a silent source, learnt from that source's own recent delivery.

A dense source silent in wall time (nothing ingested for `watermark_idle_s` before the ingest
frontier) holds its job's watermark until the job's fresh sources are its *gone-lag* of event
time ahead of it (clock.py). The wait is there for telemetry that comes in bursts (a producer
cycling over many jobs, a batching agent): no window is judged on part of its samples. One
constant for every source (`watermark_gone_lag_s`, 10 s) made every lost host wait as long as
the burstiest source could need, and a 10,000-GPU job's lost host was paged 15-23 s after it
went (bench/RESULTS.md). A source that is waited for now gets its own, a bound on how far it
lagged its job while it was delivered, from its job's events of the last `WINDOW_FACTOR` x cap
seconds of event time:

    gone_lag = min(cap, max(floor, gap + slowest - quickest + MARGIN_S))

* gap: the longest stretch of event time between two of the source's consecutive events (its cadence);
* slowest: the longest delivery delay (`ingested_at - ts`) of its events;
* quickest: the shortest delivery delay of any dense event of its job in the window.

At wall time t the job's newest event time is at most t - quickest, and a source delivered as
before has an event newer than t - slowest - gap: it lags the job by less than gap + slowest -
quickest. That covers a source shipped in bursts of B seconds (delays B apart), one shipped later
than the rest by a constant offset (a spool read every few seconds), and the agent's and the
ingest's batching. Bounds:

* floor (`watermark_gone_min_s`, 6 s: the heartbeat detector's 3 intervals of 2 s): the least lead
  of its job that lets a source go. A source normally level with its job is let go after ~6 s
  without delivery (it was 10 s); one that normally trails its job, that much sooner; none before
  `watermark_idle_s` of wall time;
* cap (`watermark_gone_lag_s`): what any source was waited for before, and what one gets whose
  events span less than the cap (too little to learn from: a new source);
* the cap, too, for every candidate of a job where more than `CORRELATED` of its hosts (and more
  than 2) are silent at once (any dense source, however briefly): a lost host is one independent
  event; many at once is the job's or the delivery's (a hang stops every host's steps; a broker or partition stall, an agent rollout,
  stalls many agents), waited for as before, and no query is made.

Delays measured while the ingest caught up with a backlog (everything ingested late, in large
batches) are wide apart, so such a source gets the cap until its window holds steady delivery again;
a host whose clock runs ahead makes its job's quickest delay negative: longer lags, never shorter.

A function of the store and the candidates (`clock.job_clocks`: silent sources the job leads by at
least the floor and less than the cap); the window starts at the job's oldest candidate's newest event less
the window. A job whose sources all arrive has none and costs no query; otherwise each dense table is
read once per job over the window, by its sorting key: the minutes of the window for NICs and
heartbeats (`schema.minutes`), the steps of the window (from `job_step_runs`) for steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from vigil.analyzer.detect.base import as_utc, ch_time
from vigil.analyzer.schema import MINUTE_FIRST, minutes
from vigil.clickhouse.query import QueryClient

MARGIN_S = 2.0
"""Seconds added to a source's bound: the next turn's clock read and a batch's jitter."""
WINDOW_FACTOR = 3.0
"""The event time learnt from, in caps (30 s at the default 10 s): more than one burst of a bursty source."""
CORRELATED = 0.02
"""The share of a job's hosts silent at once beyond which none of them is learnt from (the cap for all)."""
TABLES = {"step": "step_timings", "heartbeat": "heartbeats", "nic": "nic_counters"}
"""Dense source -> the raw table its events are stored in."""

_LO = "{lo:DateTime64(3, 'UTC')}"
_STEPS = f"""step >= ifNull((SELECT minOrNull(step) FROM job_step_runs
                            WHERE job_id = {{job:String}} AND bucket >= toStartOfInterval({_LO}, INTERVAL 10 SECOND)),
                           18446744073709551615)"""
"""The steps of the window, from the job's per-step rollup: none stored there (a pause, a hang) reads none."""
_SQL = f"""
SELECT host, min(ts) AS first, max(ts) AS last, min(d) AS quickest_ms, max(d) AS slowest_ms,
       arrayMax(arrayDifference(arraySort(groupUniqArrayIf(toUnixTimestamp64Milli(ts),
                                                           host IN {{hosts:Array(String)}})))) AS gap_ms
FROM (SELECT host, ts, dateDiff('millisecond', ts, ingested_at) AS d FROM $table
      WHERE job_id = {{job:String}} AND ts >= {_LO} AND $bound)
GROUP BY host
"""

Candidate = tuple[str, str, str, datetime]
"""(job, host, source, the source's newest event time)."""


def read(table: str) -> str:
    """The read of one dense table for a job's window, bounded by the table's sorting key as `ts >= lo` implies (the
    engine derives neither bound from `ts`)."""
    return _SQL.replace("$table", table).replace("$bound", minutes(_LO) if table in MINUTE_FIRST else _STEPS)


def learnt_lag(span_s: float, gap_s: float, slowest_s: float, quickest_s: float, *, floor_s: float,
               cap_s: float) -> float:
    """A source's gone-lag from what its window holds: `span_s` of its event time, its longest gap between two
    events, its slowest delivery and the job's quickest (module docstring)."""
    if span_s < cap_s:
        return cap_s
    return min(cap_s, max(floor_s, gap_s + slowest_s - quickest_s + MARGIN_S))


def correlated(silent: int, members: int) -> bool:
    """Whether `silent` hosts of a job of `members` falling silent at once is the job's or the delivery's doing."""
    return silent > max(2, CORRELATED * members)


def gone_lags(client: QueryClient, candidates: Iterable[Candidate], silent: Mapping[str, int],
              members: Mapping[str, int], *, floor_s: float, cap_s: float) -> dict[tuple[str, str, str], float]:
    """(job, host, source) -> its learnt gone-lag, for each candidate: the cap where nothing is stored in its window,
    and for every candidate of a job whose `silent` hosts (any dense source silent in wall time, however short) are
    `correlated` among its `members` (hosts with a dense source still arriving or waited for)."""
    by_job: dict[str, list[Candidate]] = {}
    for c in sorted(set(candidates)):
        by_job.setdefault(c[0], []).append(c)
    out: dict[tuple[str, str, str], float] = {}
    for job, mine in by_job.items():
        if correlated(silent.get(job, 0), members.get(job, 0)):
            out.update({(job, h, s): cap_s for _j, h, s, _l in mine})
            continue
        out.update(_learnt(client, job, mine, floor_s=floor_s, cap_s=cap_s))
    return out


def _learnt(client: QueryClient, job: str, mine: list[Candidate], *, floor_s: float,
            cap_s: float) -> dict[tuple[str, str, str], float]:
    lo = min(last for *_x, last in mine) - timedelta(seconds=WINDOW_FACTOR * cap_s)
    params = {"job": job, "lo": ch_time(lo), "hosts": sorted({h for _j, h, _s, _l in mine})}
    quickest: float | None = None
    seen: dict[tuple[str, str], tuple[float, float, float]] = {}  # (host, source) -> span, gap, slowest (seconds)
    for source, table in TABLES.items():
        rows = client.query(read(table), parameters=params)
        for host, first, last, quick, slow, gap in rows.result_rows:
            quickest = float(quick) / 1000 if quickest is None else min(quickest, float(quick) / 1000)
            seen[(str(host), source)] = ((as_utc(last) - as_utc(first)).total_seconds(), float(gap) / 1000,
                                         float(slow) / 1000)
    out: dict[tuple[str, str, str], float] = {}
    for _job, host, source, _last in mine:
        if (host, source) not in seen or quickest is None:  # nothing stored in its window: nothing learnt
            out[(job, host, source)] = cap_s
            continue
        span, gap, slowest = seen[(host, source)]
        out[(job, host, source)] = learnt_lag(span, gap, slowest, quickest, floor_s=floor_s, cap_s=cap_s)
    return out
