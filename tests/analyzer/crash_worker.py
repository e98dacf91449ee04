"""Subprocess body for the crash test: `ingest` (until lag is zero) or `count`, on its own chdb path."""

from __future__ import annotations

import json
import sys
import threading
import time

from analyzer.ingest.loop import IngestLoop
from analyzer.settings import AnalyzerSettings
from vigil.clickhouse import connect, migrate
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings


def main() -> None:
    mode, bootstrap, prefix, dsn = sys.argv[1:5]
    client = connect(dsn, database="vigil")
    migrate(client, {"ttl_days": 30})
    if mode == "count":
        q = {
            "steps": "SELECT count() FROM step_timings",
            "unique_steps": "SELECT uniqExact(event_id) FROM step_timings",
            "window_samples": "SELECT sum(n) FROM phase_host_windows WHERE phase = 'forward'",
            "job_step_ranks": "SELECT sum(ranks) FROM job_steps",
            "heartbeats": "SELECT count() FROM heartbeats",
        }
        print(json.dumps({k: int(client.query(v).result_rows[0][0]) for k, v in q.items()}), flush=True)
        return
    settings = VigilSettings(kafka_bootstrap=bootstrap, topic_prefix=prefix, clickhouse_dsn=dsn)
    loop = IngestLoop(settings=settings, analyzer=AnalyzerSettings(batch_events=2000, batch_s=0.5, group_id="crash"),
                      bootstrap=bootstrap, client=client,
                      producer=EventProducer(settings=settings, bootstrap=bootstrap))
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
    print("drained", flush=True)


if __name__ == "__main__":
    main()
