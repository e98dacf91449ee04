"""Flapping links: one NIC that keeps going down for seconds and coming back.

A flapping link (a bad NIC, AOC cable or switch port: MegaScale's "frequent network
interface flapping") drops every packet for a few seconds, recovers, and drops again.
No single window looks like a stall — the NIC's median rate is fine, and the job's
collectives just stall for those seconds — so the per-NIC detector never fires. Here a
NIC sample is *down* when it carries less than `flap.down_frac` of the job's median NIC
at that moment (2 s buckets) while the job is busy and fewer than a tenth of its NICs
(at most one in a small job) are that low: a whole job pausing or resuming is no flap. Nor
is a low sample in a bucket next to one where more than a tenth of the NICs were below this
bucket's down level: a pause that starts or ends within a bucket leaves a sliver of quiet
samples in its neighbour, too few to mark it, and each NIC that sampled in that sliver would
show one flap (enough to keep a firing NIC alert firing for the whole window). A sample back
up there still ends a flap, and a quiet bucket is still judged against its own median: a
link that drops while the job's other NICs stall (or idle between bursts) is down against
them. A flap is a run of down samples of at most `flap.max_down_s` followed by
recovery (a longer one is a stop: traffic_stall's). `flap.min_flaps` flaps within
`flap.window_s` raise the NIC's traffic alert (`traffic_stall`, subject `host/nic`, warning,
evidence `pattern: flap`: one alert per NIC whatever its traffic does — drop, flap or stop —
so a flapping NIC that then stops escalates the same alert) with the flap count, their
period and typical length; one flap in the window keeps it firing.
The SQL returns only NICs with a down sample, so a healthy fleet costs little to ship.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from itertools import pairwise
from typing import Any

from vigil.analyzer.detect.base import RAW_WINDOW, EvalContext, Finding, as_utc, median
from vigil.analyzer.detect.quiet import BUCKET_MS
from vigil.analyzer.settings import FlapSettings

ALERT = "traffic_stall"
"""A flapping NIC raises its traffic alert (the traffic detector's name): one alert per NIC."""
_WINDOW = f"job_id = {{job:String}} AND {RAW_WINDOW}"
_BUCKET = f"intDiv(toUnixTimestamp64Milli(ts), {BUCKET_MS})"
# Per 2 s bucket the level below which a NIC is down (-1: the bucket is not judged: the job is
# not busy, or the samples just above the lowest tenth of NICs' (one NIC's, in a small job) are
# low too) and that lowest-tenth sample (`kth_bps`), looked up per sample with `transform`. A low
# sample in a bucket next to one whose lowest tenth is below this bucket's level (many NICs far
# quieter there: a pause's edge) is not judged; an up one is. Only NICs with a down sample ship
# their samples. NICs are counted by a 64-bit hash of (host, device): ~3x faster than the pair of
# LowCardinality strings.
SQL = f"""
WITH (SELECT (groupArray(bucket), groupArray(threshold), groupArray(kth_bps)) FROM (
        SELECT {_BUCKET} AS bucket, quantile(0.5)(tx_bps + rx_bps) AS median_bps,
               arraySort(groupArray(tx_bps + rx_bps)) AS sorted, uniqExact(cityHash64(host, device)) AS nics,
               sorted[toUInt32(greatest(1, floor(0.1 * nics)) * ceil(length(sorted) / nics)) + 1] AS kth_bps,
               if(median_bps < {{busy:Float64}} OR kth_bps < {{frac:Float64}} * median_bps, -1.0,
                  {{frac:Float64}} * median_bps) AS threshold
        FROM nic_counters WHERE {_WINDOW} GROUP BY bucket)) AS levels
SELECT host, device, arraySort(x -> x.1, groupArray((ts, state))) AS seq
FROM (SELECT host, device, ts, {_BUCKET} AS b, transform(b, levels.1, levels.2, -1.0) AS threshold,
             multiIf(threshold < 0, 2, tx_bps + rx_bps >= threshold, 0,
                     transform(b - 1, levels.1, levels.3, 1e300) < threshold
                     OR transform(b + 1, levels.1, levels.3, 1e300) < threshold, 2, 1) AS state
      FROM nic_counters WHERE {_WINDOW})
GROUP BY host, device
HAVING countIf(state = 1) > 0
"""


class FlapDetector:
    name = "nic_flap"
    false_alarms_per_hour = 0.1  # 3 down-and-up episodes of one NIC within minutes
    cadence_s = 8.0  # flaps are counted over minutes: judged every 8 s of event time, not every instant
    cadence_phase_s = 6.0  # at 6, 14, 22 ... s: on the 2 s grid never at the straggler's nor traffic_stall's

    def detect(self, ctx: EvalContext) -> list[Finding]:
        s = ctx.settings.flap
        rows = ctx.rows(SQL, frac=s.down_frac, busy=ctx.settings.traffic.min_baseline_bps, lo=ctx.ago(s.window_s))
        firing = {subj.split(":", 1)[1] for subj in ctx.firing if subj.startswith(f"{ALERT}:")}
        return judge(rows, s, firing)


def flaps(seq: Sequence[tuple[Any, Any]], max_down_s: float) -> list[tuple[datetime, datetime]]:
    """(first down sample, first sample back up) of each completed short outage in a NIC's samples.

    A sample's state: 1 down, 0 up, 2 not judged (the job was not busy, or many NICs were
    low at once: the whole job pausing or resuming, not one link); those are skipped.
    """
    out = []
    start: datetime | None = None
    for ts, state in seq:
        t = as_utc(ts)
        if state == 2:
            continue
        if state == 1 and start is None:
            start = t
        elif state == 0 and start is not None:
            if (t - start).total_seconds() <= max_down_s:
                out.append((start, t))
            start = None
    return out


def judge(rows: Sequence[Mapping[str, Any]], s: FlapSettings, firing: set[str] | frozenset[str] = frozenset()
          ) -> list[Finding]:
    out = []
    for r in rows:
        host, device = str(r["host"]), str(r["device"])
        subject = f"{host}/{device}"
        seen = flaps(r["seq"], s.max_down_s)
        if len(seen) < (1 if subject in firing else s.min_flaps):
            continue
        starts = [a for a, _ in seen]
        period = median([(b - a).total_seconds() for a, b in pairwise(starts)]) if len(starts) > 1 else None
        down = median([(b - a).total_seconds() for a, b in seen])
        since = starts[min(len(starts), s.min_flaps) - 1]
        every = f" every ~{period:.0f} s" if period is not None else ""
        out.append(Finding(
            alert=ALERT, subject=subject, host=host, severity="warning", since=since,
            summary=f"{host} {device} is flapping: down {len(seen)} times in {s.window_s:.0f} s{every}, "
                    f"~{down:.0f} s each",
            evidence={"host": host, "device": device, "pattern": "flap", "flaps": len(seen), "window_s": s.window_s,
                      "period_s": None if period is None else round(period, 1), "down_s": round(down, 1),
                      "first_flap": starts[0].isoformat(), "last_flap": starts[-1].isoformat(),
                      "last_back": seen[-1][1].isoformat()}))
    return out
