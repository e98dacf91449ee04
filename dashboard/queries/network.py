"""Network: NIC throughput per host and device against the fleet, and where it dropped or stopped.

From the `nic_windows` rollup (10 s buckets, re-bucketed coarser for long ranges). Each
(host, device, bucket) is compared with that bucket's fleet median; a run of buckets
below `drop` x median is a stall segment (gaps-and-islands, in SQL), a `stop` when the
throughput was (near) zero throughout.
"""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.queries.window import Window, ts_in_window
from dashboard.store import Row, Store

ZERO_BPS = 1e3  # at or below: no traffic

_CELLS = f"""
SELECT host, device,
       toUnixTimestamp64Milli(toDateTime64(toStartOfInterval(bucket, toIntervalSecond({{bucket:UInt32}})), 3)) AS t_ms,
       sum(sum_bps) / sum(n) AS bps
FROM nic_windows
WHERE job_id = {{job:String}} AND {ts_in_window("bucket")}
GROUP BY host, device, t_ms
"""

_RATIOS = f"""
SELECT host, device, t_ms, bps, bps / nullIf(quantileExact(0.5)(bps) OVER (PARTITION BY t_ms), 0) AS ratio
FROM ({_CELLS})
"""

_FLEET_SQL = f"""
SELECT t_ms, quantileExact(0.5)(bps) AS median_bps, quantileExact(0.1)(bps) AS p10_bps, sum(bps) AS total_bps,
       count() AS nics
FROM ({_CELLS}) GROUP BY t_ms ORDER BY t_ms
"""

_SERIES_SQL = f"""
SELECT host, device, t_ms, bps, ratio FROM (
    SELECT *, dense_rank() OVER (ORDER BY worst ASC, host, device) AS worst_rank FROM (
        SELECT *, min(ifNull(ratio, 1)) OVER (PARTITION BY host, device) AS worst FROM ({_RATIOS})))
WHERE if({{host:String}} = '', worst_rank <= {{k:UInt32}}, host = {{host:String}})
ORDER BY worst_rank, t_ms
"""

_STALLS_SQL = f"""
SELECT host, device, min(t_ms) AS start_ms, max(t_ms) + {{bucket:UInt32}} * 1000 AS end_ms, count() AS buckets,
       min(ratio) AS min_ratio, min(bps) AS min_bps, if(min(bps) <= {ZERO_BPS}, 'stop', 'drop') AS kind
FROM (
    SELECT *, intDiv(t_ms, {{bucket:UInt32}} * 1000)
              - row_number() OVER (PARTITION BY host, device ORDER BY t_ms) AS island
    FROM ({_RATIOS}) WHERE ratio < {{drop:Float64}})
GROUP BY host, device, island
ORDER BY start_ms DESC, host, device LIMIT 200
"""


@dataclass(frozen=True, kw_only=True)
class NicSeries:
    host: str
    device: str
    t_ms: list[int]
    bps: list[float]
    ratio: list[float | None]


@dataclass(frozen=True, kw_only=True)
class Stall:
    host: str
    device: str
    start_ms: int
    end_ms: int
    buckets: int
    min_ratio: float
    kind: str  # stop | drop


@dataclass(frozen=True, kw_only=True)
class NetworkView:
    bucket_s: int
    drop: float
    fleet: list[Row]  # t_ms, median_bps, p10_bps, total_bps, nics
    series: list[NicSeries]
    stalls: list[Stall]


def network_view(store: Store, win: Window, *, max_points: int, worst: int = 8, host: str | None = None,
                 drop: float = 0.5) -> NetworkView:
    bucket = win.bucket_s(min(max_points, 180), minimum=10)
    p = win.params(bucket=bucket, k=worst, host=host or "", drop=drop)
    series: dict[tuple[str, str], NicSeries] = {}
    for r in store.rows("NIC throughput per host", _SERIES_SQL, p):
        key = (str(r["host"]), str(r["device"]))
        s = series.setdefault(key, NicSeries(host=key[0], device=key[1], t_ms=[], bps=[], ratio=[]))
        s.t_ms.append(int(r["t_ms"]))
        s.bps.append(float(r["bps"]))
        s.ratio.append(None if r["ratio"] is None else float(r["ratio"]))
    stalls = [Stall(host=str(r["host"]), device=str(r["device"]), start_ms=int(r["start_ms"]), end_ms=int(r["end_ms"]),
                    buckets=int(r["buckets"]), min_ratio=float(r["min_ratio"]), kind=str(r["kind"]))
              for r in store.rows("traffic stalls", _STALLS_SQL, p)]
    return NetworkView(bucket_s=bucket, drop=drop, fleet=store.rows("fleet NIC throughput", _FLEET_SQL, p),
                       series=list(series.values()), stalls=stalls)
