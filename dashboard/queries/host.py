"""Host: one machine's heartbeats, NIC throughput per port, GPU state, classified logs and alerts.

One host's raw rows are a primary-key range of each table (`job_id, host, ...`; heartbeats and
NIC samples per minute of the window, `job_id, minute, host, ...`), so the page reads them
directly and buckets them in ClickHouse: NIC throughput per (device,
port) from `nic_counters` (the `nic_windows` rollup has no port), GPU throttling per
reason (NVML's reasons, one `ARRAY JOIN` over `gpu_stats.throttle_reasons`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vigil.dashboard.queries.window import T0, T1, Window, ts_in_window
from vigil.dashboard.store import Row, Store
from vigil.dashboard.tables import (
    GPU_STATS,
    HEARTBEATS,
    HOST_CLOCK,
    HOST_PRESENCE,
    JOB_RANKS,
    LOG_LINES,
    NIC_COUNTERS,
    PHASE_HOST_WINDOWS,
    PROCESS_EXITS,
)

_BUCKET = "toUnixTimestamp64Milli(toDateTime64(toStartOfInterval(ts, toIntervalSecond({bucket:UInt32})), 3))"
_HOST = "job_id = {job:String} AND host = {host:String}"

# the newest heartbeat's minute and the one before (where host_clock says it is), not the host's whole history: the
# table sorts by the minute first
_NEWEST = f"(SELECT max(last_ts) FROM {HOST_CLOCK} WHERE {_HOST} AND source = 'heartbeat') - toIntervalSecond(60)"
IDENTITY_SQL = f"""
SELECT argMax(ip, ts) AS ip, argMax(pod, ts) AS pod, argMax(node, ts) AS node,
       argMax(agent_version, ts) AS agent_version, argMax(gpus, ts) AS gpus,
       toUnixTimestamp64Milli(max(ts)) AS last_ms, argMax(interval_s, ts) AS interval_s,
       argMax(procs_running, ts) AS procs_running, argMax(procs_total, ts) AS procs_total, count() AS n
FROM {HEARTBEATS} WHERE {_HOST} AND ts >= {_NEWEST} AND {HEARTBEATS.buckets(_NEWEST)}
"""

HEARTBEATS_SQL = f"""
SELECT {_BUCKET} AS t_ms, count() AS beats, max(interval_s) AS interval_s,
       min(procs_running) AS procs_running, max(gpus_throttled) AS gpus_throttled,
       max(gpu_ecc_uncorrected) AS ecc, sum(dropped_events) AS dropped
FROM {HEARTBEATS} WHERE {_HOST} AND {ts_in_window()} AND {HEARTBEATS.buckets(T0, T1)} GROUP BY t_ms ORDER BY t_ms
"""

# an Ethernet interface has port 0 (named by its device alone); RDMA ports count from 1
NIC_SQL = f"""
SELECT if(port = 0, toString(device), concat(device, ' port ', toString(port))) AS nic, {_BUCKET} AS t_ms,
       avg(tx_bps + rx_bps) AS bps, min(tx_bps + rx_bps) AS low_bps,
       avg(tx_bps) AS tx_mean_bps, avg(rx_bps) AS rx_mean_bps
FROM {NIC_COUNTERS} WHERE {_HOST} AND {ts_in_window()} AND {NIC_COUNTERS.buckets(T0, T1)}
GROUP BY device, port, t_ms ORDER BY device, port, t_ms
"""

_GPU_SQL = f"""
SELECT gpu, {_BUCKET} AS t_ms, avg(util_pct) AS util_pct, max(temp_c) AS temp_c, avg(sm_clock_mhz) AS sm_clock_mhz,
       avg(power_w) AS power_w
FROM {GPU_STATS} WHERE {_HOST} AND {ts_in_window()} GROUP BY gpu, t_ms ORDER BY gpu, t_ms
"""

_THROTTLE_SQL = f"""
SELECT reason, {_BUCKET} AS t_ms, count() AS samples, arrayStringConcat(arraySort(groupUniqArray(toString(gpu))), ',')
           AS gpus
FROM {GPU_STATS} ARRAY JOIN throttle_reasons AS reason
WHERE {_HOST} AND {ts_in_window()} GROUP BY reason, t_ms ORDER BY reason, t_ms
"""

_LOG_COUNTS_SQL = f"""
SELECT category, severity, sum(repeats) AS lines, toUnixTimestamp64Milli(max(ts)) AS last_ms
FROM {LOG_LINES} WHERE {_HOST} AND {ts_in_window()} GROUP BY category, severity ORDER BY lines DESC LIMIT 50
"""

_LOGS_SQL = f"""
SELECT toUnixTimestamp64Milli(ts) AS t_ms, rank, category, severity, substring(message, 1, 300) AS message,
       xid, repeats
FROM {LOG_LINES} WHERE {_HOST} AND {ts_in_window()} ORDER BY ts DESC LIMIT {{limit:UInt32}}
"""

_EXITS_SQL = f"""
SELECT toUnixTimestamp64Milli(ts) AS t_ms, rank, exit_code, signal, substring(summary, 1, 300) AS summary
FROM {PROCESS_EXITS} WHERE {_HOST} AND {ts_in_window()} ORDER BY ts DESC LIMIT 20
"""


_HOSTS_SQL = f"""
SELECT host FROM (SELECT host FROM {HOST_PRESENCE} WHERE job_id = {{job:String}}
                  UNION DISTINCT SELECT host FROM {JOB_RANKS} WHERE job_id = {{job:String}}
                  UNION DISTINCT SELECT DISTINCT host FROM {PHASE_HOST_WINDOWS} WHERE job_id = {{job:String}})
ORDER BY host
"""


@dataclass(frozen=True, kw_only=True)
class Series:
    name: str
    t_ms: list[int]
    values: dict[str, list[Any]]


@dataclass(frozen=True, kw_only=True)
class HostView:
    host: str
    identity: Row | None
    bucket_s: int
    heartbeats: Series
    nics: list[Series]  # one per NIC port
    gpus: list[Series]
    throttle: list[Series]  # one per throttle reason: GPU samples reporting it, and which GPUs
    log_counts: list[Row]
    logs: list[Row]
    exits: list[Row]


def _series_by(rows: list[Row], key: str, fields: tuple[str, ...]) -> list[Series]:
    out: dict[str, Series] = {}
    for r in rows:
        name = str(r[key])
        s = out.setdefault(name, Series(name=name, t_ms=[], values={f: [] for f in fields}))
        s.t_ms.append(int(r["t_ms"]))
        for f in fields:
            s.values[f].append(r[f])
    return list(out.values())


def host_view(store: Store, win: Window, host: str, *, max_points: int, log_limit: int = 50) -> HostView:
    p = win.params(host=host, bucket=win.bucket_s(max_points), limit=log_limit)
    ident = store.one("the host's identity", IDENTITY_SQL, p)
    if ident is not None and not int(ident["n"]):
        ident = None
    hb = store.rows("heartbeats", HEARTBEATS_SQL, p)
    return HostView(
        host=host, identity=ident, bucket_s=int(p["bucket"]),
        heartbeats=Series(name="heartbeats", t_ms=[int(r["t_ms"]) for r in hb], values={
            f: [r[f] for r in hb] for f in ("beats", "interval_s", "procs_running", "gpus_throttled", "ecc")}),
        nics=_series_by(store.rows("NIC throughput per port", NIC_SQL, p), "nic",
                        ("bps", "low_bps", "tx_mean_bps", "rx_mean_bps")),
        gpus=_series_by(store.rows("GPU state", _GPU_SQL, p), "gpu", ("util_pct", "temp_c", "sm_clock_mhz", "power_w")),
        throttle=_series_by(store.rows("GPU throttle reasons", _THROTTLE_SQL, p), "reason", ("samples", "gpus")),
        log_counts=store.rows("log line counts", _LOG_COUNTS_SQL, p),
        logs=store.rows("recent log lines", _LOGS_SQL, p),
        exits=store.rows("process exits", _EXITS_SQL, p),
    )


def job_hosts(store: Store, job: str) -> list[str]:
    rows = store.rows("hosts of the job", _HOSTS_SQL, {"job": job})
    return [str(r["host"]) for r in rows]
