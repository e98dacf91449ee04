"""Subprocess body for the crash test, on its own chdb path: `count`, `ingest` (until lag is zero), or
`crash-after-write N` (ingest, and SIGKILL itself right after the Nth batch write, before its commit)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence

from vigil.analyzer.ingest.loop import IngestLoop
from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.analyzer.settings import AnalyzerSettings
from vigil.app.components import migrate_all
from vigil.clickhouse.client import connect
from vigil.contract import Event
from vigil.kafka.consumer import Unstorable
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings


class DieAfterWrite:
    """The real writer, then SIGKILL right after the nth write: stored, not committed."""

    def __init__(self, *, inner: ClickHouseWriter, n: int) -> None:
        self.inner, self.n, self.calls = inner, n, 0

    def write(self, events: Sequence[Event]) -> list[Unstorable]:
        stored = self.inner.write(events)
        self.calls += 1
        if self.calls == self.n:
            print(f"killed after write {self.calls} of {len(events)} events", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return stored


def main() -> None:
    mode, bootstrap, prefix, dsn = sys.argv[1:5]
    client = connect(dsn, database="vigil")
    migrate_all(client, 30)
    if mode == "count":
        q = {
            "steps": "SELECT count() FROM step_timings",
            "unique_steps": "SELECT uniqExact(event_id) FROM step_timings",
            "window_samples": "SELECT sum(n) FROM phase_host_windows WHERE phase = 'forward'",
            "job_step_ranks": "SELECT sum(ranks) FROM job_steps",
            "heartbeats": "SELECT count() FROM heartbeats",
            "nic_window_samples": "SELECT sum(n) FROM nic_windows",
        }
        print(json.dumps({k: int(client.query(v).result_rows[0][0]) for k, v in q.items()}), flush=True)
        return
    settings = VigilSettings(kafka_bootstrap=bootstrap, topic_prefix=prefix, clickhouse_dsn=dsn)
    loop = IngestLoop(settings=settings, analyzer=AnalyzerSettings(batch_events=2000, batch_s=0.5, group_id="crash"),
                      bootstrap=bootstrap, client=client,
                      producer=EventProducer(settings=settings, bootstrap=bootstrap))
    if mode == "crash-after-write":
        loop.consumer.writer = DieAfterWrite(inner=loop.writer, n=int(sys.argv[5]))
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
    print(f"drained skipped_duplicates={loop.writer.skipped_duplicates}", flush=True)


if __name__ == "__main__":
    main()
