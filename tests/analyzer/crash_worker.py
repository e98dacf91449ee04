"""Subprocess body for the crash tests, on its own chdb path: `count`, `ingest` (until lag is zero),
`crash-after-write N` (ingest, and SIGKILL itself right after the Nth batch write, before its commit) or
`crash-mid-write N TABLE [VIEW]` (SIGKILL right after the Nth batch's insert into TABLE, the batch's later
tables unwritten; with VIEW, that materialised view is detached first, so TABLE's part is stored and that
view's is not: a crash between a raw part and a rollup part)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from vigil.analyzer.ingest import blocks
from vigil.analyzer.ingest.loop import IngestLoop
from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.analyzer.settings import AnalyzerSettings
from vigil.app.components import migrate_all
from vigil.clickhouse.client import connect
from vigil.contract.hotkinds import Ingestable
from vigil.kafka.consumer import BatchId, Unstorable
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings

# Raw tables: rows, distinct event_ids. Rollups: their sums next to the same figures computed from the raw rows.
RAW = ["step_timings", "heartbeats", "gpu_stats", "nic_counters", "log_lines", "process_exits", "collective_traces",
       "alert_events", "checkpoints", "recovery_actions"]
ROLLUPS = {
    "phase_host_windows": ("SELECT phase, sum(n), round(sum(sum_ms), 3) FROM phase_host_windows GROUP BY phase ORDER BY phase",
                           "SELECT phase, count(), round(sum(ms), 3) FROM step_timings ARRAY JOIN mapKeys(phases) AS phase, "
                           "mapValues(phases) AS ms GROUP BY phase ORDER BY phase"),
    "job_steps": ("SELECT sum(ranks), round(sum(sum_step_ms), 3), round(sum(sum_mfu), 6), sum(n_mfu) FROM job_steps",
                  "SELECT count(), round(sum(step_ms), 3), round(sum(ifNull(mfu, 0)), 6), countIf(mfu IS NOT NULL) "
                  "FROM step_timings"),
    "phase_rank_windows": ("SELECT phase, sum(n), round(sum(sum_ms), 3) FROM phase_rank_windows GROUP BY phase "
                           "ORDER BY phase",
                           "SELECT phase, count(), round(sum(ms), 3) FROM step_timings ARRAY JOIN mapKeys(phases) AS "
                           "phase, mapValues(phases) AS ms GROUP BY phase ORDER BY phase"),
    "job_step_runs": ("SELECT sum(ranks), round(sum(sum_step_ms), 3), round(sum(sum_mfu), 6), sum(n_mfu), "
                      "toString(sumMap(phase_n)) FROM job_step_runs",
                      "SELECT count(), round(sum(step_ms), 3), round(sum(ifNull(mfu, 0)), 6), countIf(mfu IS NOT NULL), "
                      "toString(sumMap(CAST(mapApply((k, v) -> (k, toUInt64(1)), phases), 'Map(String, UInt64)'))) "
                      "FROM step_timings"),
    "job_step_spans": ("SELECT sum(rows) FROM job_step_spans", "SELECT count() FROM step_timings"),
    "nic_windows": ("SELECT sum(n), round(sum(sum_bps)) FROM nic_windows",
                    "SELECT count(), round(sum(tx_bps + rx_bps)) FROM nic_counters"),
    "host_presence": ("SELECT count(), min(first_ts), max(last_ts) FROM (SELECT host, min(first_ts) AS first_ts, "
                      "max(last_ts) AS last_ts FROM host_presence GROUP BY host)",
                      "SELECT uniqExact(host), min(ts), max(ts) FROM heartbeats"),
    "job_clock": ("SELECT min(first_ts), max(last_ts) FROM job_clock",
                  "SELECT min(t0), max(t1) FROM (SELECT min(ts) t0, max(ts) t1 FROM step_timings UNION ALL "
                  "SELECT min(ts), max(ts) FROM heartbeats UNION ALL SELECT min(ts), max(ts) FROM nic_counters)"),
    "host_clock": ("SELECT source, count(), min(first_ts), max(last_ts) FROM (SELECT host, source, min(first_ts) first_ts, "
                   "max(last_ts) last_ts FROM host_clock GROUP BY host, source) GROUP BY source ORDER BY source",
                   "SELECT source, uniqExact(host), min(ts), max(ts) FROM (SELECT host, 'heartbeat' AS source, ts FROM heartbeats "
                   "UNION ALL SELECT host, 'nic', ts FROM nic_counters UNION ALL SELECT host, 'step', ts FROM step_timings "
                   "UNION ALL SELECT host, 'log', ts FROM log_lines UNION ALL SELECT host, 'exit', ts FROM process_exits "
                   "UNION ALL SELECT host, 'collective', ts FROM collective_traces) "
                   "GROUP BY source ORDER BY source"),
}


class DieAfterWrite:
    """The real writer, then SIGKILL right after the nth write: stored, not committed."""

    def __init__(self, *, inner: ClickHouseWriter, n: int) -> None:
        self.inner, self.n, self.calls = inner, n, 0

    def write(self, events: Sequence[Ingestable], batch: BatchId | None = None) -> list[Unstorable]:
        stored = self.inner.write(events, batch)
        self.calls += 1
        if self.calls == self.n:
            print(f"killed after write {self.calls} of {len(events)} events", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return stored


def die_mid_write(n: int, table: str) -> None:
    """SIGKILL right after the nth batch's insert into `table` (the writer inserts tables in name order)."""
    real = blocks.BlockInserter.insert
    seen: dict[str, int] = {}

    def insert(self: Any, tbl: str, rows: Any, token: str | None) -> None:
        real(self, tbl, rows, token)
        if tbl == table:
            seen[tbl] = seen.get(tbl, 0) + 1
            if seen[tbl] == n:
                print(f"killed mid-write {n} after {tbl}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)

    blocks.BlockInserter.insert = insert  # type: ignore[method-assign]


def count(client: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for t in RAW:
        key = "event_id, gpu" if t == "gpu_stats" else "event_id"  # a row per GPU of a heartbeat
        n, u = client.query(f"SELECT count(), uniqExact({key}) FROM {t}").result_rows[0]
        out[t] = [int(n), int(u)]
    for name, (rollup, raw) in ROLLUPS.items():
        out[name] = [[str(v) for v in row] for row in client.query(rollup).result_rows]
        out[name + ":raw"] = [[str(v) for v in row] for row in client.query(raw).result_rows]
    return out


def main() -> None:
    mode, bootstrap, prefix, dsn = sys.argv[1:5]
    client = connect(dsn, database="vigil")
    migrate_all(client, 3650)  # its fixtures carry fixed dates: kept past the 30-day TTL (tests/conftest.py)
    if mode == "count":
        print(json.dumps(count(client)), flush=True)
        return
    for view in ("phase_host_windows_mv",):  # a view detached by a crashed run comes back
        if not client.query(f"SELECT count() FROM system.tables WHERE name = '{view}'").result_rows[0][0]:
            client.command(f"ATTACH TABLE {view}")
    settings = VigilSettings(kafka_bootstrap=bootstrap, topic_prefix=prefix, clickhouse_dsn=dsn)
    loop = IngestLoop(settings=settings, analyzer=AnalyzerSettings(batch_events=2000, batch_s=0.5, group_id="crash"),
                      bootstrap=bootstrap, client=client,
                      producer=EventProducer(settings=settings, bootstrap=bootstrap))
    if mode == "crash-after-write":
        loop.consumer.writer = DieAfterWrite(inner=loop.writer, n=int(sys.argv[5]))
    if mode == "crash-mid-write":
        die_mid_write(int(sys.argv[5]), sys.argv[6])
        if len(sys.argv) > 7:
            client.command(f"DETACH TABLE {sys.argv[7]}")
    stop = threading.Event()
    t = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    t.start()
    deadline = time.monotonic() + 120
    last_check = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        print(f"events {loop.stats.events} {time.time():.1f} {loop.stats.records} {loop.stats.last_error[:200]}", flush=True)
        if time.monotonic() - last_check >= 1.0:
            last_check = time.monotonic()
            lag = loop.probe.sample()
            if lag and sum(lag.values()) == 0:
                break
    stop.set()
    t.join(30)
    s = loop.stats
    print(f"drained skipped_duplicates={loop.writer.skipped_duplicates} replayed={s.replayed_batches} "
          f"rechecked={s.rechecked_batches} failed={loop.failed!r} offloaded={loop.writer.offloaded_batches}", flush=True)


if __name__ == "__main__":
    main()
