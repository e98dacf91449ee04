"""A job's event-time clock: each source's progress, the watermark, and the grid of instants.

`host_clock` keeps, per job, host and source, the newest event time stored and when it
was last ingested (wall). Sources are *dense* (steps, heartbeats, NIC samples: they
arrive all the time while the job runs) or *sparse* (log lines, process exits, Flight
Recorder dumps: they may not arrive for hours).

Watermark rules (what `JobClock.until` returns, the newest instant that may be judged):

* A dense source is *alive* while something of it was ingested within `idle_s` of the
  ingest *frontier* — the wall time before which everything produced to the telemetry
  topics has been stored (from the consumer group's offsets; without one, now) — or, silent
  that long, while the job's fresh sources are less than `gone_lag_s` of event time ahead of
  it: a host whose telemetry comes in bursts (a producer cycling over many jobs, a batching
  agent) is waited for, so no window is judged on part of its samples. A source that lags
  because the ingest is saturated stays alive; one whose agent sends nothing goes idle once
  the job has moved `gone_lag_s` past it, and its silence is then final (the heartbeat
  detector's to report). Live, `gone_lag_s` is the cap: each source the job leads by at least
  `gone_min_s` while it is silent gets a gone-lag learnt from its own recent delivery
  (`delivery`: how far it can have lagged its job), so a steadily shipped host that is lost is
  let go after `gone_min_s` and a bursty one is waited for as long as its bursts need.
* While any dense source is alive, the watermark is the oldest newest-timestamp among the
  alive ones (hosts on partitions that catch up at different paces are all there up to
  it), but never more than `max_lag_s` behind the job's newest dense timestamp (a host
  replaying a long spool does not stall the rest of the job; detectors treat it as late) --
  unless the topic it comes from is *behind* (`behind`: some partition of it has not caught up
  with the end offset it had `watermark_idle_s` ago, `topic_behind`): then what it lacks may be
  in flight, and it holds the watermark however far the job's other topics are ahead (a heavy
  topic behind a light one is behind, not silent).
* When every dense source is idle the job has stopped (finished, crashed, or all its hosts
  went silent): the clock runs to the newest timestamp of any source, sparse ones
  included, so the exits and logs that end a job are judged live as replay judges them.

Order: a source's events are assumed stored in event-time order (each host's agent ships in
order, keyed by host, through an idempotent producer; a partition keeps that order; the
ingest writes batches in order), so a source stored up to `last_ts` has everything before
it. Hosts interleave at will. Events of one source that arrive out of order may be judged
missing before they land (a heartbeat gap paged, then resolved).

Instants are the multiples of `eval_step_s` since 1970 (the grid), whatever the job or
when it was first seen, so live and replay judge the same instants; the last instant of
a stopped job is the grid point at or after its newest timestamp.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from vigil.analyzer.delivery import Candidate, gone_lags
from vigil.analyzer.detect.base import EPOCH, SourceClock, as_utc, ch_time
from vigil.clickhouse.query import QueryClient

DENSE = ("step", "heartbeat", "nic")
SPARSE = ("log", "exit", "collective")
TOPIC_OF = {"step": "steps", "heartbeat": "heartbeats", "nic": "nic", "log": "logs", "exit": "logs",
            "collective": "collectives"}
"""Source -> the topic its events are ingested from (vigil/contract/registry.py)."""


def topic_behind(frontiers: Mapping[str, datetime] | None, now: datetime, slack_s: float) -> frozenset[str]:
    """The dense sources whose topic has not been caught up within `slack_s` of `now`: its frontier (every record
    produced to all its partitions before it is stored) is older, or unknown. None (no ingest measured: replay, a
    test): none is behind."""
    if frontiers is None:
        return frozenset()
    since = now - timedelta(seconds=slack_s)
    return frozenset(s for s in DENSE if (f := frontiers.get(TOPIC_OF[s])) is None or f < since)


@dataclass(frozen=True, kw_only=True)
class JobClock:
    job: str
    first_ts: datetime
    last_ts: datetime  # newest event of any source
    watermark: datetime
    stopped: bool  # every dense source idle
    last_ingested: datetime  # wall clock, any source
    sources: dict[tuple[str, str], SourceClock]

    def until(self, step_s: float) -> datetime:
        """The newest grid instant that may be judged now."""
        return grid_ceil(self.last_ts, step_s) if self.stopped else grid_floor(self.watermark, step_s)


_CLOCKS_SQL = """
SELECT job_id, host, source, min(first_ts) AS first, max(last_ts) AS last, max(last_ingested) AS ingested
FROM host_clock WHERE $where GROUP BY job_id, host, source ORDER BY job_id
"""

_ACTIVE_SQL = """
SELECT job_id FROM host_clock GROUP BY job_id HAVING max(last_ingested) > {since:DateTime64(3, 'UTC')}
"""


def job_clocks(client: QueryClient, *, job: str | None = None, active_since: datetime | None = None,
               also: Sequence[str] = (), frontier: datetime | None = None, idle_s: float = 5.0,
               max_lag_s: float | None = None, gone_lag_s: float = 0.0,
               gone_min_s: float | None = None, behind: frozenset[str] = frozenset()) -> list[JobClock]:
    """The clock of `job`, or of every job with anything ingested after `active_since` (plus `also`).

    `frontier` (wall): everything produced before it is stored; None = replay (nothing more
    is coming: every source idle). `gone_min_s`: learn each silent source's gone-lag, at least
    this and at most `gone_lag_s` (`delivery`); None: `gone_lag_s` for every source. `behind`: the dense sources
    whose topic is not caught up (`topic_behind`): `max_lag_s` lets none of them go.
    """
    params: dict[str, object] = {}
    if job is not None:
        where, params["job"] = "job_id = {job:String}", job
    elif active_since is not None:
        where = f"job_id IN ({_ACTIVE_SQL}) OR job_id IN {{also:Array(String)}}"
        params["since"], params["also"] = ch_time(active_since), list(also)
    else:
        where = "1"
    rows = client.query(_CLOCKS_SQL.replace("$where", where), parameters=params).result_rows
    per_job: dict[str, list[Source]] = defaultdict(list)
    for j, host, source, first, last, ingested in rows:
        per_job[str(j)].append((str(host), str(source), as_utc(first), as_utc(last), as_utc(ingested)))
    clocks = [clock_of(j, srcs, frontier, idle_s, max_lag_s, gone_lag_s, behind=behind)
              for j, srcs in sorted(per_job.items())]
    if gone_min_s is None or gone_min_s >= gone_lag_s or frontier is None:
        return clocks
    quiet = {c.job: _silent(c, frontier, idle_s) for c in clocks}
    waited: list[Candidate] = [(c.job, h, s, c.sources[(h, s)].last_ts)  # the job leads them by the floor or more
                               for c in clocks for h, s, lead in quiet[c.job] if lead >= gone_min_s]
    if not waited:
        return clocks
    silent = {job: len({h for h, _s, _l in q}) for job, q in quiet.items()}
    members = {c.job: len({h for (h, s), sc in c.sources.items() if s in DENSE and sc.alive}) for c in clocks}
    learnt: dict[str, dict[tuple[str, str], float]] = defaultdict(dict)
    for (j, h, s), lag in gone_lags(client, waited, silent, members, floor_s=gone_min_s, cap_s=gone_lag_s).items():
        learnt[j][(h, s)] = lag
    return [clock_of(j, srcs, frontier, idle_s, max_lag_s, gone_lag_s, learnt[j], behind) if j in learnt else c
            for (j, srcs), c in zip(sorted(per_job.items()), clocks, strict=True)]


Source = tuple[str, str, datetime, datetime, datetime]
"""One row of `host_clock` for a job: host, source, first and newest event time, when last ingested (wall)."""


def _silent(clock: JobClock, frontier: datetime, idle_s: float) -> list[tuple[str, str, float]]:
    """(host, source, the job's lead on it in seconds) of each dense source of `clock` silent in wall time (nothing
    ingested within `idle_s` of `frontier`) that still holds the watermark; none while no dense source arrives."""
    idle_before = frontier - timedelta(seconds=idle_s)
    newest = max((c.last_ts for (_h, s), c in clock.sources.items() if s in DENSE and c.ingested > idle_before),
                 default=None)
    if newest is None:
        return []
    return [(h, s, (newest - c.last_ts).total_seconds()) for (h, s), c in sorted(clock.sources.items())
            if s in DENSE and c.alive and c.ingested <= idle_before]


def clock_of(job: str, srcs: list[Source], frontier: datetime | None, idle_s: float, max_lag_s: float | None,
           gone_lag_s: float = 0.0, gone: Mapping[tuple[str, str], float] | None = None,
           behind: frozenset[str] = frozenset()) -> JobClock:
    """`gone`: (host, source) -> its own gone-lag, where learnt (else `gone_lag_s`); `behind`: sources whose topic
    is not caught up, never let go by `max_lag_s`."""
    idle_before = frontier - timedelta(seconds=idle_s) if frontier is not None else None
    fresh = {(h, s): idle_before is not None and ingested > idle_before for h, s, _f, _l, ingested in srcs}
    newest = max((last for h, s, _f, last, _i in srcs if s in DENSE and fresh[(h, s)]), default=None)
    lags = gone or {}

    def alive(h: str, s: str, last: datetime) -> bool:  # fresh, or silent but not yet left behind by the job
        return fresh[(h, s)] or (s in DENSE and newest is not None
                                 and (newest - last).total_seconds() < lags.get((h, s), gone_lag_s))

    sources = {(h, s): SourceClock(last_ts=last, ingested=ingested, alive=alive(h, s, last))
               for h, s, _f, last, ingested in srcs}
    dense = [c for (_h, s), c in sources.items() if s in DENSE]
    alive_ts = [c.last_ts for c in dense if c.alive]
    last_ts = max(c.last_ts for c in sources.values())
    if alive_ts:
        watermark = min(alive_ts)
        if max_lag_s is not None:  # a long spool does not stall the job: the sources of caught-up topics only
            watermark = max(watermark, max(c.last_ts for c in dense) - timedelta(seconds=max_lag_s))
            held = [c.last_ts for (_h, s), c in sources.items() if s in behind and s in DENSE and c.alive]
            watermark = min([watermark, *held])
    else:
        watermark = last_ts
    return JobClock(job=job, first_ts=min(f for _h, _s, f, _l, _i in srcs), last_ts=last_ts, watermark=watermark,
                    stopped=not alive_ts, last_ingested=max(i for *_x, i in srcs), sources=sources)


def grid_floor(ts: datetime, step_s: float) -> datetime:
    """The grid instant at or before `ts` (millisecond arithmetic: no float drift)."""
    ms = (ts - EPOCH) // timedelta(milliseconds=1)
    step = max(1, round(step_s * 1000))
    return EPOCH + timedelta(milliseconds=ms - ms % step)


def grid_ceil(ts: datetime, step_s: float) -> datetime:
    """The grid instant at or after `ts`."""
    floor = grid_floor(ts, step_s)
    return floor if floor >= ts else floor + timedelta(milliseconds=max(1, round(step_s * 1000)))


def grid(after: datetime, until: datetime, step_s: float, limit: int | None = None) -> list[datetime]:
    """Grid instants in (after, until], oldest first; at most `limit`."""
    step = timedelta(milliseconds=max(1, round(step_s * 1000)))
    out: list[datetime] = []
    t = grid_floor(after, step_s) + step
    while t <= until and (limit is None or len(out) < limit):
        out.append(t)
        t += step
    return out
