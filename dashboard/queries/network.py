"""Network: NIC throughput per host and device against the fleet, and where it dropped or stopped.

From the `nic_windows` rollup (one row per host, device and 10 s bucket). Three scans:

1. the fleet per 10 s bucket: median, p10 and total of NIC throughput (also the baseline);
2. per (host, device): its lowest ratio to the bucket's fleet median, and its stall
   segments: runs of consecutive buckets below `drop` x median (gaps-and-islands with
   array functions), a `stop` when some bucket was (near) zero;
3. the points of the NICs to draw (the `worst` lowest, or one host's), re-bucketed.

The medians of scan 1 are bound as array parameters into 2 and 3 (`transform`), so each
scan is a plain aggregation, with no self-join or window over millions of rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vigil.dashboard.queries.window import Window, ts_in_window
from vigil.dashboard.store import Row, Store
from vigil.dashboard.tables import NIC_WINDOWS

ZERO_BPS = 1e3  # at or below: no traffic
NATIVE_S = 10  # nic_windows bucket (migration 0100)

_WHERE = f"job_id = {{job:String}} AND {ts_in_window('bucket')}"
_T_MS = "toUnixTimestamp64Milli(toDateTime64(bucket, 3))"
_RATIO = f"(sum_bps / n) / transform({_T_MS}, {{med_t:Array(Int64)}}, {{med_v:Array(Float64)}}, 0.0)"

# each stored row is one NIC's mean over (part of) a bucket: a sample of the fleet's distribution
_FLEET_SQL = f"""
SELECT {_T_MS} AS t_ms, quantile(0.5)(sum_bps / n) AS median_bps, quantile(0.1)(sum_bps / n) AS p10_bps
FROM {NIC_WINDOWS} WHERE {_WHERE} AND n > 0
GROUP BY t_ms ORDER BY t_ms
"""

_NICS_SQL = f"""
SELECT host, device, worst, segments FROM (
    SELECT host, device, min(ratio) AS worst,
           arraySort(groupArrayIf((t_ms, bps, ratio), ratio < {{drop:Float64}})) AS low,
           arraySplit((p, brk) -> brk, low,
                      arrayMap(i -> i > 1 AND low[i].1 - low[i - 1].1 > {NATIVE_S * 1000}, arrayEnumerate(low)))
               AS runs,
           arrayMap(r -> (r[1].1, r[-1].1 + {NATIVE_S * 1000}, length(r), arrayMin(x -> x.3, r),
                          arrayMin(x -> x.2, r)), runs) AS segments
    FROM (SELECT host, device, {_T_MS} AS t_ms, sum_bps / n AS bps, {_RATIO} AS ratio
          FROM {NIC_WINDOWS} WHERE {_WHERE} AND n > 0)
    WHERE isFinite(ratio)
    GROUP BY host, device)
ORDER BY worst, host, device
LIMIT {{k:UInt32}} BY notEmpty(segments)
"""

_SERIES_SQL = f"""
SELECT host, device,
       toUnixTimestamp64Milli(toDateTime64(toStartOfInterval(bucket, toIntervalSecond({{bucket:UInt32}})), 3)) AS t_ms,
       sum(sum_bps) / sum(n) AS bps, avgIf({_RATIO}, n > 0) AS ratio
FROM {NIC_WINDOWS}
WHERE {_WHERE} AND if({{host:String}} = '', (toString(host), toString(device)) IN {{pairs:Array(Tuple(String, String))}},
                      host = {{host:String}})
GROUP BY host, device, t_ms ORDER BY host, device, t_ms
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
    fleet: list[Row]  # t_ms, median_bps, p10_bps (per 10 s bucket)
    series: list[NicSeries]
    stalls: list[Stall]


def _finite(v: Any) -> float | None:
    if v is None:
        return None
    f = float(v)
    return f if f == f and f not in (float("inf"), float("-inf")) else None


def network_view(store: Store, win: Window, *, max_points: int, worst: int = 8, host: str | None = None,
                 drop: float = 0.5, max_stalls: int = 200) -> NetworkView:
    bucket = win.bucket_s(min(max_points, 180), minimum=NATIVE_S)
    fleet = store.rows("fleet NIC throughput", _FLEET_SQL, win.params())
    med = {"med_t": [int(r["t_ms"]) for r in fleet], "med_v": [float(r["median_bps"]) for r in fleet]}
    nics = store.rows("NIC stalls", _NICS_SQL, win.params(drop=drop, k=max(worst, max_stalls), **med))
    stalls = [Stall(host=str(r["host"]), device=str(r["device"]), start_ms=int(s[0]), end_ms=int(s[1]),
                    buckets=int(s[2]), min_ratio=float(s[3]), kind="stop" if float(s[4]) <= ZERO_BPS else "drop")
              for r in nics for s in r["segments"]]
    stalls.sort(key=lambda s: (-s.start_ms, s.host, s.device))
    pairs = [(str(r["host"]), str(r["device"])) for r in nics[:worst]]
    series: dict[tuple[str, str], NicSeries] = {}
    rows = store.rows("NIC throughput per host", _SERIES_SQL,
                      win.params(bucket=bucket, host=host or "", pairs=pairs, **med)) if pairs or host else []
    for r in rows:
        key = (str(r["host"]), str(r["device"]))
        s = series.setdefault(key, NicSeries(host=key[0], device=key[1], t_ms=[], bps=[], ratio=[]))
        s.t_ms.append(int(r["t_ms"]))
        s.bps.append(float(r["bps"]))
        s.ratio.append(_finite(r["ratio"]))
    order = {p: i for i, p in enumerate(pairs)}
    shown = sorted(series.values(), key=lambda s: (order.get((s.host, s.device), len(order)), s.host, s.device))
    return NetworkView(bucket_s=bucket, drop=drop, fleet=fleet, series=shown, stalls=stalls[:max_stalls])
