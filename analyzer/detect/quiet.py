"""When is the whole job quiet? Its NIC traffic as one signal, per 2-second bucket.

A job that pauses (an evaluation, a checkpoint, a hang, the end of training) goes quiet
on every NIC at once: to zero, or merely low (NCCL keeps polling, evaluation moves a
little). Judged NIC by NIC, that is hundreds of identical warnings. Here the job's
median NIC per 2 s bucket (`quantile(0.5)` over every NIC sample in it) is compared with
the job's busy level, the 90th percentile of those medians over `traffic.quiet_ref_s`:
a bucket is quiet below `traffic.quiet_frac` of it. The per-NIC detector skips quiet
buckets, so baselines neither alert on nor learn from a pause, raises nothing new per NIC
while the latest bucket is quiet (the job going quiet: one host may lead the rest by a few
seconds), and reports a quiet job once (subject `job`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from vigil.analyzer.detect.base import RAW_WINDOW, EvalContext
from vigil.analyzer.settings import TrafficSettings

BUCKET_MS = 2000

SERIES_SQL = f"""
SELECT intDiv(toUnixTimestamp64Milli(ts), {BUCKET_MS}) AS bucket, quantile(0.5)(tx_bps + rx_bps) AS median_bps,
       count() AS samples
FROM nic_counters
WHERE job_id = {{job:String}} AND {RAW_WINDOW}
GROUP BY bucket ORDER BY bucket
"""


@dataclass(frozen=True, kw_only=True)
class JobQuiet:
    busy_bps: float = 0.0  # the job's busy level (its median NIC when training)
    quiet: frozenset[int] = field(default_factory=frozenset)  # quiet buckets (ms // BUCKET_MS)
    paused_since: datetime | None = None  # start of the quiet run that holds now, if the job is quiet now
    level: float = 1.0  # the latest buckets' median NIC, as a fraction of busy
    going_quiet: bool = False  # the latest bucket is quiet: the job may be pausing (or resuming)

    @property
    def paused(self) -> bool:
        return self.paused_since is not None


def bucket_start(b: int) -> datetime:
    return datetime.fromtimestamp(b * BUCKET_MS / 1000, UTC)


def job_quiet(ctx: EvalContext, s: TrafficSettings) -> JobQuiet:
    rows = ctx.rows(SERIES_SQL, lo=ctx.ago(s.quiet_ref_s))
    return classify(rows, s, ctx.at)


def classify(rows: Sequence[Mapping[str, Any]], s: TrafficSettings, at: datetime) -> JobQuiet:
    """Quiet buckets and whether the job is quiet now (most buckets of the last `recent_s` quiet)."""
    series = [(int(r["bucket"]), float(r["median_bps"])) for r in rows if int(r["samples"]) > 0]
    if not series:
        return JobQuiet()
    ranked = sorted(v for _, v in series)
    busy = ranked[min(len(ranked) - 1, int(0.9 * len(ranked)))]
    if busy < s.min_baseline_bps:
        return JobQuiet(busy_bps=busy)  # never busy in the reference history: nothing to be quiet against
    quiet = frozenset(b for b, v in series if v < s.quiet_frac * busy)
    recent_from = int((at - timedelta(seconds=s.recent_s)).timestamp() * 1000) // BUCKET_MS
    recent = [b for b, _ in series if b > recent_from]
    paused_since = None
    if recent and sum(1 for b in recent if b in quiet) * 2 > len(recent):
        first = series[-1][0]
        for b, _ in reversed(series):  # back to the start of the quiet run (one busy bucket may interrupt it)
            if b in quiet:
                first = b
            elif b - 1 not in quiet or b + 1 not in quiet:
                break
        paused_since = bucket_start(first)
    tail = [v for b, v in series if b > recent_from] or [series[-1][1]]
    return JobQuiet(busy_bps=busy, quiet=quiet, paused_since=paused_since, level=sorted(tail)[len(tail) // 2] / busy,
                    going_quiet=series[-1][0] in quiet)
